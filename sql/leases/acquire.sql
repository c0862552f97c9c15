-- Takes the key when it has no row or its lease lapsed by the database clock, and with $4 (raw
-- grants) also when this owner holds it with a raw grant: an idempotent re-acquire that keeps the
-- token and never shortens the lease. Without $4 (managed leases) a live row is never taken, this
-- owner's included: every managed lease is a tenure of its own, and no other lease can share or
-- shorten it. A managed grant marks its tenure (managed_token = token); a raw grant never takes a
-- marked live row, so no other handle with the same owner name (another family, another process)
-- adopts a managed lease's tenure and its token. The mark names the token rather than being a flag:
-- any new tenure draws a new token, so a row taken over by a statement that does not know the
-- column (the previous release's, in a rolling upgrade) or force-released is never left marked
-- with a stale mark. A refused acquire matches nothing and skips the insert (its sequence value is
-- drawn only for a row it writes): no write, no WAL flush. Racing acquirers of a lapsed key: the
-- UPDATE re-checks the newest row version, so exactly one wins.
-- $1 key, $2 owner, $3 TTL in microseconds, $4 re-acquire this owner's live tenure, $5 fold the
-- server's timeline into new tokens, $6 hold grants off after a promotion, $7 $8 $9 the table's
-- promotion record as the caller last read it (sql/schema/promotion.sql): its timeline, when it was
-- first seen, when grants resume.
-- epoch: with $5, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $5 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
-- gate: with $6, a lapsed or absent key is granted only on the timeline the record names, from
-- when grants resume, and once this grant's own TTL has passed since the timeline was first seen. A
-- holder whose last renewals, or whose whole grant, a promoted standby never received believes it
-- holds the key until its local deadline, at most one TTL after the old primary's last commit; the
-- wait outlasts it when that TTL reached the standby, or when this grant asks for one as long. Live
-- tenures are not held off: this owner's re-acquire of its live raw grant goes on, as renewals do.
-- stale: on a server whose timeline is not $7, the answer has one more row, with stale true and
-- no token (and a refused grant has only that row): the caller reads the record again (recording
-- the promotion if it is the first to see it) and sends the grant again. So the first grant of any
-- kind after a promotion, refused ones included, starts the hold-off.
WITH epoch AS (
    SELECT CASE WHEN $5::boolean
                THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
                ELSE 0 END AS timeline
),
gate AS (
    SELECT NOT $6::boolean
        OR ((SELECT timeline FROM epoch) = $7::bigint
            AND ($9::timestamptz IS NULL OR $9::timestamptz <= now())
            AND ($8::timestamptz IS NULL
                 OR $8::timestamptz + $3::bigint * interval '1 microsecond' <= now())) AS open
),
base AS (
    SELECT CASE WHEN timeline > 0 THEN (timeline - 1) << 48 ELSE 0 END AS base FROM epoch
),
taken AS (
    UPDATE {table} AS l
       SET (token, managed_token) = (
               SELECT fresh.token, CASE WHEN $4 THEN NULL ELSE fresh.token END
                 FROM (SELECT CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.token
                                   ELSE greatest(l.token + 1, (SELECT base FROM base)
                                                              + nextval('{table:token_seq}'))
                              END AS token) AS fresh),
           acquired_at = CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.acquired_at
                              ELSE now() END,
           superseded = l.owner = $2 AND l.held_until > now() AND l.superseded,
           owner = $2,
           held_until = greatest(CASE WHEN l.held_until > now() THEN l.held_until END,
                                 now() + $3::bigint * interval '1 microsecond')
     WHERE l.key = $1
       AND ((l.held_until <= now() AND (SELECT open FROM gate))
            OR ($4 AND l.owner = $2 AND l.held_until > now()
                AND l.managed_token IS DISTINCT FROM l.token))
    RETURNING l.token, l.superseded
),
created AS (
    INSERT INTO {table} AS l (key, owner, held_until, token, superseded, acquired_at,
                              managed_token)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', fresh.token, false, now(),
           CASE WHEN $4 THEN NULL ELSE fresh.token END
      FROM (SELECT (SELECT base FROM base) + nextval('{table:token_seq}') AS token) AS fresh
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE key = $1)
       AND (SELECT open FROM gate)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.token, l.superseded
)
SELECT token, superseded, false AS stale FROM taken
UNION ALL
SELECT token, superseded, false FROM created
UNION ALL
SELECT NULL, NULL, true
 WHERE $6::boolean
   AND (SELECT timeline FROM epoch) <> $7::bigint
