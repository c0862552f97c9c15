-- Registers units (weight 1, a random slot); existing units are left as they are, except one removed
-- while owned, which is registered again in place (weight 1, the same owner): never a second,
-- claimable copy beside its owner's. Returns how many are new or registered again, and the owners of
-- those registered again, whose change counters the caller then moves (bump_changes.sql) so they
-- re-read them; their reported count and weight grow back at once (an expired owner's units are
-- claimable again).
-- $1 tenants, $2 shards.
WITH added AS (
    INSERT INTO {units} AS u (tenant, shard)
    SELECT tenant, shard FROM unnest($1::text[], $2::integer[]) AS s (tenant, shard)
    ON CONFLICT (tenant, shard) DO UPDATE SET removed = false, weight = 1 WHERE u.removed
    RETURNING u.process_id
),
counted AS (
    UPDATE {processes} p
       SET unit_count = p.unit_count + r.units, weight = p.weight + r.units
      FROM (SELECT process_id, count(*) AS units FROM added
             WHERE process_id IS NOT NULL GROUP BY process_id) r
     WHERE p.process_id = r.process_id
)
SELECT (SELECT count(*) FROM added) AS added,
       (SELECT coalesce(array_agg(DISTINCT process_id::text), '{}') FROM added
         WHERE process_id IS NOT NULL) AS owners
