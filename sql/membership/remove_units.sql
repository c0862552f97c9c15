-- Unregisters units. A unit whose owner is live may still be worked on: it is disabled and marked
-- removed instead of deleted, so that it is never claimed, nor registered again as a new claimable
-- unit, while its owner works on it; the owner learns it at its next tick (its change counter
-- moves) and deletes it when it gives it back. Any other unit is deleted at once. The owners'
-- reported counts and weights drop at once (an expired owner never heartbeats again).
-- $1 tenants, $2 shards.
WITH target AS (
    SELECT u.tenant, u.shard, u.process_id, u.weight,
           EXISTS (SELECT 1 FROM {processes} p
                    WHERE p.process_id = u.process_id AND p.expires_at > now()) AS owner_live
      FROM {units} u
      JOIN unnest($1::text[], $2::integer[]) AS s (tenant, shard)
        ON u.tenant = s.tenant AND u.shard = s.shard
     WHERE NOT u.removed
       FOR UPDATE OF u
),
deleted AS (
    DELETE FROM {units} u
     USING target t
     WHERE u.tenant = t.tenant AND u.shard = t.shard AND NOT t.owner_live
    RETURNING t.process_id, t.weight
),
marked AS (
    UPDATE {units} u
       SET weight = 0, removed = true
      FROM target t
     WHERE u.tenant = t.tenant AND u.shard = t.shard AND t.owner_live
    RETURNING t.process_id, t.weight
),
told AS (
    UPDATE {processes} p
       SET changes = p.changes + 1,
           unit_count = p.unit_count - r.units,
           weight = p.weight - r.weight
      FROM (SELECT process_id, count(*) AS units, sum(greatest(weight, 0)) AS weight
              FROM (SELECT * FROM deleted UNION ALL SELECT * FROM marked) gone
             WHERE process_id IS NOT NULL GROUP BY process_id) r
     WHERE p.process_id = r.process_id
)
SELECT (SELECT count(*) FROM deleted) + (SELECT count(*) FROM marked) AS count
