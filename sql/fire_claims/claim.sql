-- Wins the fire key when no live claim exists: replaces an expired claim in place, or inserts the
-- first one. A refused claim (live claim, even our own) matches nothing and skips the insert, so it
-- writes nothing. Racing claimers of an expired key: the UPDATE re-checks the newest row version,
-- so exactly one wins. $4 is a random id of this call: a claim sent again because the connection
-- failed after sending (it may have committed) finds its own win by it, and writes nothing more.
-- $1 fire_key, $2 holder, $3 TTL in microseconds, $4 claim id.
WITH replaced AS (
    UPDATE {table}
       SET holder = $2,
           claimed_at = now(),
           expires_at = now() + $3::bigint * interval '1 microsecond',
           claim_id = $4
     WHERE fire_key = $1
       AND expires_at <= now()
    RETURNING 1
),
created AS (
    INSERT INTO {table} (fire_key, holder, claimed_at, expires_at, claim_id)
    SELECT $1, $2, now(), now() + $3::bigint * interval '1 microsecond', $4
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE fire_key = $1)
    ON CONFLICT (fire_key) DO NOTHING
    RETURNING 1
),
already AS (
    SELECT 1 FROM {table} WHERE fire_key = $1 AND claim_id = $4
)
SELECT EXISTS (SELECT 1 FROM replaced)
    OR EXISTS (SELECT 1 FROM created)
    OR EXISTS (SELECT 1 FROM already) AS won
