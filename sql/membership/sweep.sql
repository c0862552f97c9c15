-- Deletes process rows expired before the cutoff and frees their units in the same statement
-- (deleting those removed while they owned them). The units are locked first and freed or deleted by
-- their locked, latest version (see delete_process.sql).
-- $1 cutoff in microseconds.
WITH dead AS (
    DELETE FROM {processes}
     WHERE expires_at < now() - $1::bigint * interval '1 microsecond'
    RETURNING process_id
),
theirs AS MATERIALIZED (
    SELECT tenant, shard, removed FROM {units}
     WHERE process_id IN (SELECT process_id FROM dead)
       FOR UPDATE
),
freed AS (
    UPDATE {units} u SET process_id = NULL, claimed_at = NULL
      FROM theirs t
     WHERE u.tenant = t.tenant AND u.shard = t.shard AND NOT t.removed
    RETURNING 1
),
purged AS (
    DELETE FROM {units} u
     USING theirs t
     WHERE u.tenant = t.tenant AND u.shard = t.shard AND t.removed
    RETURNING 1
)
SELECT (SELECT count(*) FROM dead) AS processes,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM purged) AS units
