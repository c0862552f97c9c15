-- Gives back the listed units, guarded by owner and by the process's own liveness (a stale tick
-- sheds nothing), deleting those removed meanwhile (see remove_units.sql), and updates its reported
-- count and weight in the same statement. The units are locked first and freed or deleted by their
-- locked, latest version (see delete_process.sql). A unit still locked by a transaction (a fenced
-- write left open) is skipped, not waited for: the shed runs on the membership loop, which must keep
-- heartbeating; the process gives it back at a later tick.
-- $1 process id, $2 tenants, $3 shards, $4 units owned, $5 weight owned.
WITH me AS (
    SELECT 1 FROM {processes} WHERE process_id = $1::uuid AND expires_at > now()
),
mine AS MATERIALIZED (
    SELECT u.tenant, u.shard, u.weight, u.removed
      FROM {units} u
      JOIN unnest($2::text[], $3::integer[]) AS s (tenant, shard)
        ON u.tenant = s.tenant AND u.shard = s.shard
     WHERE u.process_id = $1::uuid
       AND EXISTS (SELECT 1 FROM me)
       FOR UPDATE OF u SKIP LOCKED
),
shed AS (
    UPDATE {units} u
       SET process_id = NULL, claimed_at = NULL
      FROM mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND NOT m.removed
    RETURNING u.tenant, u.shard, u.weight
),
purged AS (
    DELETE FROM {units} u
     USING mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND m.removed
    RETURNING u.tenant, u.shard, u.weight
),
given AS (
    SELECT * FROM shed UNION ALL SELECT * FROM purged
),
counted AS (
    UPDATE {processes}
       SET unit_count = $4 - (SELECT count(*) FROM given),
           weight = $5 - (SELECT coalesce(sum(weight), 0) FROM given)
     WHERE process_id = $1::uuid
       AND EXISTS (SELECT 1 FROM given)
)
SELECT tenant, shard FROM given
