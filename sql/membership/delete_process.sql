-- Removes the process row, the last step of a graceful shutdown; units it still owns are freed in the
-- same statement (removed ones deleted), since units of a missing process row would never look
-- expired. The units are locked first and freed or deleted by their locked, latest version: judged
-- on the snapshot, a unit removed or registered again meanwhile would be neither.
-- $1 process id.
WITH mine AS MATERIALIZED (
    SELECT tenant, shard, removed FROM {units} WHERE process_id = $1::uuid FOR UPDATE
),
gone AS (
    DELETE FROM {processes} WHERE process_id = $1::uuid RETURNING 1
),
freed AS (
    UPDATE {units} u SET process_id = NULL, claimed_at = NULL
      FROM mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND NOT m.removed
    RETURNING 1
),
purged AS (
    DELETE FROM {units} u
     USING mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND m.removed
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS processes,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM purged) AS units
