-- Removes the process row, the last step of a graceful shutdown; units it still owns are freed in the
-- same statement, since units of a missing process row would never look expired.
-- $1 process id.
WITH gone AS (
    DELETE FROM {processes} WHERE process_id = $1::uuid RETURNING 1
),
freed AS (
    UPDATE {units} SET process_id = NULL, claimed_at = NULL
     WHERE process_id = $1::uuid AND NOT removed
    RETURNING 1
),
purged AS (
    DELETE FROM {units} WHERE process_id = $1::uuid AND removed RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS processes,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM purged) AS units
