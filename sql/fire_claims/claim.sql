-- Wins the fire key when no live claim exists: replaces an expired claim in place, or inserts the
-- first one. A refused claim (live claim, even our own) matches nothing and skips the insert, so it
-- writes nothing. Racing claimers of an expired key: the UPDATE re-checks the newest row version,
-- so exactly one wins. $1 fire_key, $2 holder, $3 TTL in microseconds.
WITH replaced AS (
    UPDATE {table}
       SET holder = $2,
           claimed_at = now(),
           expires_at = now() + $3::bigint * interval '1 microsecond'
     WHERE fire_key = $1
       AND expires_at <= now()
    RETURNING 1
),
created AS (
    INSERT INTO {table} (fire_key, holder, claimed_at, expires_at)
    SELECT $1, $2, now(), now() + $3::bigint * interval '1 microsecond'
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE fire_key = $1)
    ON CONFLICT (fire_key) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM replaced) OR EXISTS (SELECT 1 FROM created) AS won
