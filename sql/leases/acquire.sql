-- Takes the key when it has no row or its lease lapsed by the database clock, and with $4 (raw
-- grants) also when this owner holds it: an idempotent re-acquire that keeps the token and never
-- shortens the lease. Without $4 (managed leases) a live row is never taken, this owner's included:
-- every managed lease is a tenure of its own, and no other lease can share or shorten it. A refused
-- acquire matches nothing and skips the insert: no write, no WAL flush. Racing acquirers of a lapsed
-- key: the UPDATE re-checks the newest row version, so exactly one wins.
-- $1 key, $2 owner, $3 TTL in microseconds, $4 re-acquire this owner's live tenure.
WITH taken AS (
    UPDATE {table} AS l
       SET token = CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.token
                        ELSE nextval('{table:token_seq}') END,
           acquired_at = CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.acquired_at
                              ELSE now() END,
           superseded = l.owner = $2 AND l.held_until > now() AND l.superseded,
           owner = $2,
           held_until = greatest(CASE WHEN l.held_until > now() THEN l.held_until END,
                                 now() + $3::bigint * interval '1 microsecond')
     WHERE l.key = $1
       AND (l.held_until <= now() OR ($4 AND l.owner = $2))
    RETURNING l.token, l.superseded
),
created AS (
    INSERT INTO {table} AS l (key, owner, held_until, token, superseded, acquired_at)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', nextval('{table:token_seq}'), false, now()
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE key = $1)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.token, l.superseded
)
SELECT token, superseded FROM taken
UNION ALL
SELECT token, superseded FROM created
