-- Deletes process rows expired before the cutoff and frees their units in the same statement
-- (deleting those removed while they owned them). The units are locked first and freed or deleted by
-- their locked, latest version (see delete_process.sql). Also frees units whose process row is
-- missing and that were claimed before the cutoff (a claim that was still running when its process
-- deleted its row leaves them, and nothing else would ever free them); a unit claimed since then,
-- by a process newer than this statement's snapshot, is left alone. A unit locked by a transaction
-- (a fenced write the dead process still holds open, say) is skipped, never waited for: the sweep
-- runs on every process's membership loop, and one stuck transaction must not stall them all. Its
-- row stays a stray, freed by a later sweep.
-- $1 cutoff in microseconds.
WITH dead AS (
    DELETE FROM {processes}
     WHERE expires_at < now() - $1::bigint * interval '1 microsecond'
    RETURNING process_id
),
theirs AS MATERIALIZED (
    SELECT tenant, shard, removed FROM {units}
     WHERE process_id IN (SELECT process_id FROM dead)
       FOR UPDATE SKIP LOCKED
),
strays AS MATERIALIZED (
    SELECT u.tenant, u.shard, u.removed FROM {units} u
     WHERE u.process_id IS NOT NULL
       AND u.claimed_at < now() - $1::bigint * interval '1 microsecond'
       AND NOT EXISTS (SELECT 1 FROM {processes} p WHERE p.process_id = u.process_id)
       FOR UPDATE OF u SKIP LOCKED
),
affected AS (
    SELECT * FROM theirs UNION ALL SELECT * FROM strays
),
freed AS (
    UPDATE {units} u SET process_id = NULL, claimed_at = NULL
      FROM affected a
     WHERE u.tenant = a.tenant AND u.shard = a.shard AND NOT a.removed
    RETURNING 1
),
purged AS (
    DELETE FROM {units} u
     USING affected a
     WHERE u.tenant = a.tenant AND u.shard = a.shard AND a.removed
    RETURNING 1
)
SELECT (SELECT count(*) FROM dead) AS processes,
       (SELECT count(*) FROM freed) + (SELECT count(*) FROM purged) AS units
