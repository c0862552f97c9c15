-- Sets a unit's weight; 0 disables it (never claimed, given back by its owner). The owner's change
-- counter moves, so it re-reads its units at its next tick.
-- $1 tenant, $2 shard, $3 weight.
WITH changed AS (
    UPDATE {units} SET weight = $3 WHERE tenant = $1 AND shard = $2 RETURNING process_id
),
told AS (
    UPDATE {processes} SET changes = changes + 1
     WHERE process_id IN (SELECT process_id FROM changed WHERE process_id IS NOT NULL)
)
SELECT 1 FROM changed
