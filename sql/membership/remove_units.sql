-- Unregisters units; an owner learns it at its next tick (the unit is lost).
-- $1 tenants, $2 shards.
WITH removed AS (
    DELETE FROM {units} u
     USING unnest($1::text[], $2::integer[]) AS s (tenant, shard)
     WHERE u.tenant = s.tenant AND u.shard = s.shard
    RETURNING 1
)
SELECT count(*) FROM removed
