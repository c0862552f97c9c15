-- Registers units (weight 1, a random slot); existing units are left as they are.
-- $1 tenants, $2 shards.
WITH added AS (
    INSERT INTO {units} (tenant, shard)
    SELECT tenant, shard FROM unnest($1::text[], $2::integer[]) AS s (tenant, shard)
    ON CONFLICT (tenant, shard) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM added
