-- Unregisters units; their owners' change counters move, so each learns it at its next tick.
-- $1 tenants, $2 shards.
WITH removed AS (
    DELETE FROM {units} u
     USING unnest($1::text[], $2::integer[]) AS s (tenant, shard)
     WHERE u.tenant = s.tenant AND u.shard = s.shard
    RETURNING u.process_id
),
told AS (
    UPDATE {processes} SET changes = changes + 1
     WHERE process_id IN (SELECT process_id FROM removed WHERE process_id IS NOT NULL)
)
SELECT count(*) FROM removed
