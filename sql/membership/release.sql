-- Gives back every unit of this process in one statement (graceful shutdown), so the others claim
-- them at their next tick without waiting for a TTL; the reconciler was told they are lost first.
-- Units a tick adopted again since then (it was told they are gained) are kept, with the counts.
-- Units removed while this process had them are deleted (see remove_units.sql). The units are
-- locked first and freed or deleted by their locked, latest version (see delete_process.sql).
-- $1 process id, $2 tenants and $3 shards kept, $4 units kept, $5 weight kept.
WITH mine AS MATERIALIZED (
    SELECT u.tenant, u.shard, u.removed FROM {units} u
     WHERE u.process_id = $1::uuid
       AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::integer[]) AS k (tenant, shard)
                        WHERE k.tenant = u.tenant AND k.shard = u.shard)
       FOR UPDATE OF u
),
released AS (
    UPDATE {units} u
       SET process_id = NULL, claimed_at = NULL
      FROM mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND NOT m.removed
    RETURNING u.tenant, u.shard
),
purged AS (
    DELETE FROM {units} u
     USING mine m
     WHERE u.tenant = m.tenant AND u.shard = m.shard AND m.removed
    RETURNING u.tenant, u.shard
),
counted AS (
    UPDATE {processes} SET unit_count = $4, weight = $5 WHERE process_id = $1::uuid
)
SELECT tenant, shard FROM released UNION ALL SELECT tenant, shard FROM purged
