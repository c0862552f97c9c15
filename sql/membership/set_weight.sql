-- Sets a unit's weight; 0 disables it (never claimed, given back by its owner). The owner's change
-- counter moves, so it re-reads its units at its next tick, and its reported weight follows at once
-- (an expired owner never heartbeats again: claims would otherwise chase weight it no longer has).
-- A removed unit is not registered: its weight stays 0.
-- $1 tenant, $2 shard, $3 weight.
WITH changed AS (
    UPDATE {units} u SET weight = $3
      FROM {units} o
     WHERE u.tenant = $1 AND u.shard = $2 AND o.tenant = u.tenant AND o.shard = u.shard
       AND NOT u.removed
    RETURNING u.process_id, greatest($3, 0) - greatest(o.weight, 0) AS delta
),
told AS (
    UPDATE {processes} p SET changes = p.changes + 1, weight = p.weight + c.delta
      FROM changed c
     WHERE p.process_id = c.process_id
)
SELECT 1 FROM changed
