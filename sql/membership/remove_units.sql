-- Unregisters units; their owners' change counters move, so each learns it at its next tick, and
-- their reported counts and weights drop at once (an expired owner never heartbeats again).
-- $1 tenants, $2 shards.
WITH removed AS (
    DELETE FROM {units} u
     USING unnest($1::text[], $2::integer[]) AS s (tenant, shard)
     WHERE u.tenant = s.tenant AND u.shard = s.shard
    RETURNING u.process_id, u.weight
),
told AS (
    UPDATE {processes} p
       SET changes = p.changes + 1,
           unit_count = p.unit_count - r.units,
           weight = p.weight - r.weight
      FROM (SELECT process_id, count(*) AS units, sum(greatest(weight, 0)) AS weight
              FROM removed WHERE process_id IS NOT NULL GROUP BY process_id) r
     WHERE p.process_id = r.process_id
)
SELECT count(*) FROM removed
