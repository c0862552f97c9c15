-- Sets a unit's weight; 0 disables it (never claimed, given back by its owner).
-- $1 tenant, $2 shard, $3 weight.
UPDATE {units} SET weight = $3 WHERE tenant = $1 AND shard = $2 RETURNING 1
