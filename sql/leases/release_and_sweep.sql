-- Releases as release.sql does, and deletes rows whose lease lapsed over an hour ago (left by
-- holders that stopped without releasing). The delete scans the table, so it is a statement of its
-- own, sent at most once a minute: folded into release.sql it would keep PostgreSQL from ever
-- choosing that statement's generic plan (planned once) over one planned for each call.
-- $1 key, $2 owner, $3 token or null.
WITH released AS (
    UPDATE {table}
       SET held_until = now()
     WHERE key = $1
       AND owner = $2
       AND (($3::bigint IS NULL AND managed_token IS DISTINCT FROM token) OR token = $3)
       AND held_until > now()
    RETURNING 1
),
swept AS (
    DELETE FROM {table}
     WHERE held_until < now() - interval '1 hour'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM released) AS released,
       (SELECT count(*) FROM swept) AS swept
