-- Extends every live lease of this owner among the keys, in one statement for the whole batch; a key
-- missing from the result is lost (taken, released, deleted or lapsed). Never shortens a lease (a
-- shorter TTL than the row has left keeps the row's expiry). Matches nothing it does not extend, so
-- it writes only what it renews. The keys reach the planner through a sub-SELECT, so every plan
-- assumes the same batch size and PostgreSQL keeps its generic plan (planned once, not per call).
-- A tenure a managed lease holds (managed_token = token) is not this batch's, even under the same
-- owner name: it is renewed only by its lease (renew_tenure.sql), and reported lost here.
-- $1 keys, $2 owner, $3 TTL in microseconds.
UPDATE {table}
   SET held_until = greatest(held_until, now() + $3::bigint * interval '1 microsecond')
 WHERE key = ANY ((SELECT $1::text[])::text[])
   AND owner = $2
   AND held_until > now()
   AND managed_token IS DISTINCT FROM token
RETURNING key, token, superseded
