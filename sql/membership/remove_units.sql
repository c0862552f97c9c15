-- Unregisters units. An owned unit may still be worked on: it is disabled and marked removed instead
-- of deleted, so that it is never claimed, nor registered again as a new claimable unit, while its
-- owner works on it; the owner deletes it when it gives it back (an expired owner's are purged by the
-- sweep). An unowned unit is deleted at once. Whether a unit is owned is judged on its locked,
-- latest version. Returns the owners of every unit named, removed now or before, whose change
-- counters the caller then moves in a statement of its own (bump_changes.sql: this statement's
-- snapshot may not see an owner whose row is newer than it). The reported count and weight of
-- owners it sees drop at once (an expired owner never heartbeats again).
-- $1 tenants, $2 shards.
WITH target AS MATERIALIZED (
    SELECT u.tenant, u.shard, u.process_id, u.weight, u.removed
      FROM {units} u
      JOIN unnest($1::text[], $2::integer[]) AS s (tenant, shard)
        ON u.tenant = s.tenant AND u.shard = s.shard
       FOR UPDATE OF u
),
deleted AS (
    DELETE FROM {units} u
     USING target t
     WHERE u.tenant = t.tenant AND u.shard = t.shard AND t.process_id IS NULL
    RETURNING 1
),
marked AS (
    UPDATE {units} u
       SET weight = 0, removed = true
      FROM target t
     WHERE u.tenant = t.tenant AND u.shard = t.shard
       AND t.process_id IS NOT NULL AND NOT t.removed
    RETURNING t.process_id, t.weight
),
counted AS (
    UPDATE {processes} p
       SET unit_count = p.unit_count - r.units,
           weight = p.weight - r.weight
      FROM (SELECT process_id, count(*) AS units, sum(greatest(weight, 0)) AS weight
              FROM marked GROUP BY process_id) r
     WHERE p.process_id = r.process_id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM marked) AS removed,
       (SELECT coalesce(array_agg(DISTINCT process_id::text), '{}') FROM target
         WHERE process_id IS NOT NULL) AS owners
