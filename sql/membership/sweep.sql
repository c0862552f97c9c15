-- Deletes process rows expired before the cutoff and frees their units in the same statement
-- (deleting those removed while they owned them).
-- $1 cutoff in microseconds.
WITH dead AS (
    DELETE FROM {processes}
     WHERE expires_at < now() - $1::bigint * interval '1 microsecond'
    RETURNING process_id
),
freed AS (
    UPDATE {units} SET process_id = NULL, claimed_at = NULL
     WHERE process_id IN (SELECT process_id FROM dead) AND NOT removed
    RETURNING 1
),
purged AS (
    DELETE FROM {units}
     WHERE process_id IN (SELECT process_id FROM dead) AND removed
    RETURNING 1
)
SELECT (SELECT count(*) FROM dead) AS processes,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM purged) AS units
