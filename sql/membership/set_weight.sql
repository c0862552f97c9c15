-- Sets a unit's weight; 0 disables it (never claimed, given back by its owner). The change is
-- computed from the unit's locked, latest version; the owner's reported weight follows at once (an
-- expired owner never heartbeats again), and the caller moves its change counter
-- (bump_changes.sql) so it re-reads its units at its next tick. A removed unit is not registered.
-- $1 tenant, $2 shard, $3 weight.
WITH old AS MATERIALIZED (
    SELECT tenant, shard, process_id, weight FROM {units}
     WHERE tenant = $1 AND shard = $2 AND NOT removed
       FOR UPDATE
),
changed AS (
    UPDATE {units} u SET weight = $3
      FROM old
     WHERE u.tenant = old.tenant AND u.shard = old.shard
    RETURNING old.process_id, greatest($3, 0) - greatest(old.weight, 0) AS delta
),
counted AS (
    UPDATE {processes} p SET weight = p.weight + c.delta
      FROM changed c
     WHERE p.process_id = c.process_id
)
SELECT process_id::text AS owner FROM changed
