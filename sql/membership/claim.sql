-- Claims up to $2 units and about $3 weight for this process, only while its own row is live (checked
-- inside the statement, so a stale tick claims nothing). Candidates: units of expired processes (per
-- expired process, through the owner index in slot order), then unowned units from a random slot
-- onwards, wrapping around (claimable index); FOR UPDATE SKIP LOCKED lets concurrent claimers take
-- disjoint units without waiting.
-- An expired process's row is locked before any of its units, and its expiry re-checked on the row's
-- latest version: the statement's snapshot may predate a heartbeat that made the process live again
-- (it then re-reads and works on its units), and a claim must not take them from under it. A process
-- whose heartbeat is in flight (its row locked) is skipped; a heartbeat that reaches the row after
-- the lock waits for this claim to commit, so its answer comes after the process's local deadline and
-- the process forgets its units (`Leaser::heartbeat`). Only expired processes that still own
-- claimable units are locked (a lock writes the row: drained rows waiting for the sweep would cost
-- every claim a write each).
-- The claimer's reported count and weight, and those of the expired processes it took units from
-- (with their change counters), are updated in the same statement. The limits are sub-SELECTs, so
-- every plan assumes the same batch size and PostgreSQL keeps its generic plan (planned once, not
-- per call).
-- Every claimed unit gets a new fencing token from the sequence. mark is the row's part of the
-- digest stats.sql reads (the same expression).
-- $1 process id, $2 most units, $3 weight budget, $4 random slot, $5 units owned, $6 weight owned,
-- $7 fold the server's timeline into new tokens.
-- epoch: with $7, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $7 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
WITH epoch AS (
    SELECT CASE WHEN $7::boolean
                THEN (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1)
                     << 48
                ELSE 0 END AS base
),
me AS (
    SELECT 1 FROM {processes} WHERE process_id = $1::uuid AND expires_at > now()
),
expired AS MATERIALIZED (
    SELECT p.process_id
      FROM {processes} p
     WHERE p.expires_at <= now()
       AND EXISTS (SELECT 1 FROM me)
       -- A scalar sub-SELECT in the owner index's order, so it is looked up per expired row
       -- through that index (an EXISTS becomes a semi-join over every unit, and an unordered
       -- LIMIT 1 a scan that reads the whole table for a process that owns nothing).
       AND (SELECT true FROM {units} u WHERE u.process_id = p.process_id AND u.weight > 0
             ORDER BY u.slot LIMIT 1)
       FOR NO KEY UPDATE OF p SKIP LOCKED
),
orphaned AS (
    SELECT o.tenant, o.shard, o.weight, o.process_id
      FROM expired p
     CROSS JOIN LATERAL (
           SELECT u.tenant, u.shard, u.weight, u.process_id
             FROM {units} u
            WHERE u.process_id = p.process_id AND u.weight > 0
            ORDER BY u.slot
            LIMIT (SELECT $2)
              FOR UPDATE SKIP LOCKED
           ) o
     LIMIT (SELECT $2)
),
from_slot AS (
    SELECT tenant, shard, weight, process_id
      FROM {units}
     WHERE process_id IS NULL AND weight > 0 AND slot >= $4
       AND EXISTS (SELECT 1 FROM me)
     ORDER BY slot
     LIMIT (SELECT $2)
       FOR UPDATE SKIP LOCKED
),
before_slot AS (
    SELECT tenant, shard, weight, process_id
      FROM {units}
     WHERE process_id IS NULL AND weight > 0 AND slot < $4
       AND EXISTS (SELECT 1 FROM me)
     ORDER BY slot
     LIMIT (SELECT $2)
       FOR UPDATE SKIP LOCKED
),
candidates AS (
    SELECT * FROM orphaned
    UNION ALL SELECT * FROM from_slot
    UNION ALL SELECT * FROM before_slot
    LIMIT (SELECT $2)
),
-- The picked units go to the UPDATE as arrays: the planner cannot know how many rows the limits let
-- through (it guesses a tenth of what it expects the candidates to be, which grows with the number of
-- expired processes), and with that guess it would hash-join them against a scan of the whole units
-- table; an unnest is always expected to be short, so each unit is found by its primary key.
picked AS (
    SELECT array_agg(tenant) AS tenants, array_agg(shard) AS shards, array_agg(process_id) AS previous
      FROM (SELECT tenant, shard, weight, process_id,
                   sum(weight) OVER (ROWS UNBOUNDED PRECEDING) AS running
              FROM candidates) c
     WHERE running - weight < $3
),
claimed AS (
    UPDATE {units} u
       SET process_id = $1::uuid, claimed_at = now(),
           token = greatest(u.token + 1, (SELECT base FROM epoch) + nextval('{units:token_seq}'))
      FROM unnest((SELECT tenants FROM picked), (SELECT shards FROM picked),
                  (SELECT previous FROM picked)) AS p (tenant, shard, previous)
     WHERE u.tenant = p.tenant AND u.shard = p.shard
    RETURNING u.tenant, u.shard, u.weight, u.token, u.removed, p.previous
),
drained AS (
    UPDATE {processes} p
       SET unit_count = p.unit_count - d.units,
           weight = p.weight - d.weight,
           changes = p.changes + 1
      FROM (SELECT previous, count(*) AS units, sum(weight) AS weight
              FROM claimed WHERE previous IS NOT NULL GROUP BY previous) d
     WHERE p.process_id = d.previous
),
counted AS (
    UPDATE {processes}
       SET unit_count = $5 + (SELECT count(*) FROM claimed),
           weight = $6 + (SELECT coalesce(sum(weight), 0) FROM claimed)
     WHERE process_id = $1::uuid
       AND EXISTS (SELECT 1 FROM claimed)
)
SELECT tenant, shard, weight, token, removed,
       hashint8(coalesce(token, 0)) # hashtext(tenant) # shard # weight AS mark
  FROM claimed
