-- Deletes claims that expired more than $1 microseconds ago (by the database clock) and counts them,
-- in one statement; the expires_at index finds them without scanning live claims.
WITH purged AS (
    DELETE FROM {table}
     WHERE expires_at < now() - $1::bigint * interval '1 microsecond'
    RETURNING 1
)
SELECT count(*) FROM purged
