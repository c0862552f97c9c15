-- Takes the job's row only when its stored tick is older than $2 and the job is not busy by the
-- database clock; creates it when absent. A refused claim matches nothing and skips the insert, so it
-- writes nothing (no xid, no WAL flush). Concurrent claimers of one tick: the UPDATE's re-check of
-- the newest row version (tick < $2) lets exactly one through; ON CONFLICT DO NOTHING does the same
-- for the first tick. A tick more than $7 microseconds ahead of now() is reported and stored nowhere
-- (a minute for raw claims; none for a scheduler, which claims a tick only once it is due). $5 is
-- a random id of this call: a claim sent again because the connection failed after sending (it may
-- have committed) finds its own win by it (already), and writes nothing more.
-- $1 job_id, $2 tick, $3 busy period in microseconds, $4 owner, $5 claim id, $6 fold the server's
-- timeline into new tokens, $7 how far ahead of now() a tick may be, in microseconds.
-- epoch: with $6, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $6 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
WITH epoch AS (
    SELECT CASE WHEN $6::boolean
                THEN (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1)
                     << 48
                ELSE 0 END AS base
),
input AS (
    SELECT $2::timestamptz > now() + $7::bigint * interval '1 microsecond' AS too_far
),
taken AS (
    UPDATE {table} AS c
       SET tick = $2,
           busy_until = now() + $3::bigint * interval '1 microsecond',
           owner = $4,
           token = greatest(c.token + 1, (SELECT base FROM epoch) + 1),
           claim_id = $5
      FROM input
     WHERE c.job_id = $1
       AND NOT input.too_far
       AND c.tick < $2
       AND (c.busy_until IS NULL OR c.busy_until <= now())
    RETURNING c.token
),
created AS (
    INSERT INTO {table} AS c (job_id, tick, busy_until, owner, token, claim_id)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', $4,
           (SELECT base FROM epoch) + 1, $5
      FROM input
     WHERE NOT input.too_far
       AND NOT EXISTS (SELECT 1 FROM {table} WHERE job_id = $1)
    ON CONFLICT (job_id) DO NOTHING
    RETURNING c.token
),
already AS (
    SELECT token FROM {table} WHERE job_id = $1 AND tick = $2 AND claim_id = $5
)
SELECT input.too_far,
       now() AS db_now,
       (SELECT token FROM taken
        UNION ALL SELECT token FROM created
        UNION ALL SELECT token FROM already
        LIMIT 1) AS token
  FROM input
