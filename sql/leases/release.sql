-- Ends this owner's live lease now (keeping the row, so the update is HOT and the token history
-- stays), guarded by owner and, when $3 is not null, by token. With $4 it also deletes rows whose
-- lease lapsed over an hour ago (left by holders that stopped without releasing); that part scans
-- the table, so callers ask for it at most once a minute.
-- $1 key, $2 owner, $3 token or null, $4 sweep.
WITH released AS (
    UPDATE {table}
       SET held_until = now()
     WHERE key = $1
       AND owner = $2
       AND ($3::bigint IS NULL OR token = $3)
       AND held_until > now()
    RETURNING 1
),
swept AS (
    DELETE FROM {table}
     WHERE $4::boolean
       AND held_until < now() - interval '1 hour'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM released) AS released,
       (SELECT count(*) FROM swept) AS swept
