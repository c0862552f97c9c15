-- Claims up to $2 units and about $3 weight for this process, only while its own row is live (checked
-- inside the statement, so a stale tick claims nothing). Candidates: units of expired processes
-- (owner index), then unowned units from a random slot onwards, wrapping around (claimable index);
-- FOR UPDATE SKIP LOCKED lets concurrent claimers take disjoint units without waiting. The claimer's
-- reported count and weight are updated in the same statement.
-- $1 process id, $2 most units, $3 weight budget, $4 random slot, $5 units owned, $6 weight owned.
WITH me AS (
    SELECT 1 FROM {processes} WHERE process_id = $1::uuid AND expires_at > now()
),
orphaned AS (
    SELECT u.tenant, u.shard, u.weight
      FROM {units} u
     WHERE u.process_id IN (SELECT process_id FROM {processes} WHERE expires_at <= now())
       AND u.weight > 0
       AND EXISTS (SELECT 1 FROM me)
     LIMIT $2
       FOR UPDATE OF u SKIP LOCKED
),
from_slot AS (
    SELECT tenant, shard, weight
      FROM {units}
     WHERE process_id IS NULL AND weight > 0 AND slot >= $4
       AND EXISTS (SELECT 1 FROM me)
     ORDER BY slot
     LIMIT $2
       FOR UPDATE SKIP LOCKED
),
before_slot AS (
    SELECT tenant, shard, weight
      FROM {units}
     WHERE process_id IS NULL AND weight > 0 AND slot < $4
       AND EXISTS (SELECT 1 FROM me)
     ORDER BY slot
     LIMIT $2
       FOR UPDATE SKIP LOCKED
),
candidates AS (
    SELECT * FROM orphaned
    UNION ALL SELECT * FROM from_slot
    UNION ALL SELECT * FROM before_slot
    LIMIT $2
),
picked AS (
    SELECT tenant, shard
      FROM (SELECT tenant, shard, weight,
                   sum(weight) OVER (ROWS UNBOUNDED PRECEDING) AS running
              FROM candidates) c
     WHERE running - weight < $3
),
claimed AS (
    UPDATE {units} u
       SET process_id = $1::uuid, claimed_at = now()
      FROM picked
     WHERE u.tenant = picked.tenant AND u.shard = picked.shard
    RETURNING u.tenant, u.shard, u.weight
),
counted AS (
    UPDATE {processes}
       SET unit_count = $5 + (SELECT count(*) FROM claimed),
           weight = $6 + (SELECT coalesce(sum(weight), 0) FROM claimed)
     WHERE process_id = $1::uuid
       AND EXISTS (SELECT 1 FROM claimed)
)
SELECT tenant, shard, weight FROM claimed
