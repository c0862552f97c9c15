-- Registers units (weight 1, a random slot); existing units are left as they are, except one removed
-- while its owner still had it, which is registered again in place (weight 1, the same owner, whose
-- change counter moves so it re-reads it): never a second, claimable copy beside its owner's.
-- $1 tenants, $2 shards.
WITH added AS (
    INSERT INTO {units} AS u (tenant, shard)
    SELECT tenant, shard FROM unnest($1::text[], $2::integer[]) AS s (tenant, shard)
    ON CONFLICT (tenant, shard) DO UPDATE SET removed = false, weight = 1 WHERE u.removed
    RETURNING u.process_id
),
told AS (
    UPDATE {processes} SET changes = changes + 1
     WHERE process_id IN (SELECT process_id FROM added WHERE process_id IS NOT NULL)
)
SELECT count(*) FROM added
