-- A managed lease's renewal: guarded by owner and token, so a stale tenure can never extend a newer
-- one of the same owner. It only ever extends: a renewal sent again after an unknown outcome can
-- commit after the first attempt, or the other way round, and the attempt whose transaction began
-- earlier (now() is its start) must not cut the lease below what the later one granted. No row back
-- means the lease is no longer ours.
-- $1 key, $2 owner, $3 token, $4 TTL in microseconds.
UPDATE {table}
   SET held_until = greatest(held_until, now() + $4::bigint * interval '1 microsecond')
 WHERE key = $1
   AND owner = $2
   AND token = $3
   AND held_until > now()
RETURNING superseded
