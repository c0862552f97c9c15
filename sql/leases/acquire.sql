-- Takes the key when it has no row or its lease lapsed by the database clock, and with $4 (raw
-- grants) also when this owner holds it: an idempotent re-acquire that keeps the token and never
-- shortens the lease. Without $4 (managed leases) a live row is never taken, this owner's included:
-- every managed lease is a tenure of its own, and no other lease can share or shorten it. A refused
-- acquire matches nothing and skips the insert: no write, no WAL flush. Racing acquirers of a lapsed
-- key: the UPDATE re-checks the newest row version, so exactly one wins.
-- $1 key, $2 owner, $3 TTL in microseconds, $4 re-acquire this owner's live tenure, $5 fold the
-- server's timeline into new tokens, $6 hold grants off after a promotion.
-- epoch: with $5, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $5 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
-- promotion, gate: with $6, the first grant to see a new timeline records when it did
-- ({table:promotion}), and grants of lapsed and absent keys wait until both the longest TTL ever
-- asked for (as the promoted server knows it) and this grant's own TTL have passed since. A holder
-- whose last renewals, or whose whole grant, the promoted standby never received believes it holds
-- the key until its local deadline, at most one TTL after the old primary's last commit; the wait
-- outlasts it when that TTL reached the standby, or when this grant asks for one as long. A
-- concurrent first sight that loses the row lock matches nothing (the re-checked row has the new
-- timeline) and reads the old row from its snapshot: closed as well. Live tenures are not held
-- off: this owner's re-acquire of its live raw grant goes on, as renewals do. Without $6 the
-- record is kept but not obeyed. The record is written only by the first statement to see a new
-- timeline, refused or not (once per promotion), and by a grant that may succeed with a TTL longer
-- than any before: an acquire refused because the key is held still writes nothing.
WITH epoch AS (
    SELECT CASE WHEN $5::boolean
                THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
                ELSE 0 END AS timeline
),
promotion AS (
    UPDATE {table:promotion} AS p
       SET timeline = greatest(p.timeline, e.timeline),
           seen_at = CASE WHEN e.timeline > p.timeline THEN now() ELSE p.seen_at END,
           grants_from = CASE WHEN e.timeline > p.timeline
                              THEN greatest(p.grants_from,
                                            now() + p.longest_ttl * interval '1 microsecond')
                              ELSE p.grants_from END,
           longest_ttl = greatest(p.longest_ttl, $3)
      FROM epoch AS e
     WHERE e.timeline > p.timeline
        OR ($3 > p.longest_ttl
            AND NOT EXISTS (SELECT 1 FROM {table} AS l
                             WHERE l.key = $1 AND l.held_until > now() AND NOT ($4 AND l.owner = $2)))
    RETURNING p.seen_at, p.grants_from
),
gate AS (
    SELECT NOT $6::boolean
        OR coalesce((SELECT grants_from <= now()
                            AND seen_at + $3::bigint * interval '1 microsecond' <= now()
                       FROM promotion),
                    (SELECT p.grants_from <= now()
                            AND p.seen_at + $3::bigint * interval '1 microsecond' <= now()
                            AND e.timeline <= p.timeline
                       FROM {table:promotion} AS p, epoch AS e),
                    true) AS open
),
base AS (
    SELECT CASE WHEN timeline > 0 THEN (timeline - 1) << 48 ELSE 0 END AS base FROM epoch
),
taken AS (
    UPDATE {table} AS l
       SET token = CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.token
                        ELSE greatest(l.token + 1, (SELECT base FROM base)
                                                   + nextval('{table:token_seq}')) END,
           acquired_at = CASE WHEN $4 AND l.owner = $2 AND l.held_until > now() THEN l.acquired_at
                              ELSE now() END,
           superseded = l.owner = $2 AND l.held_until > now() AND l.superseded,
           owner = $2,
           held_until = greatest(CASE WHEN l.held_until > now() THEN l.held_until END,
                                 now() + $3::bigint * interval '1 microsecond')
     WHERE l.key = $1
       AND ((l.held_until <= now() AND (SELECT open FROM gate))
            OR ($4 AND l.owner = $2 AND l.held_until > now()))
    RETURNING l.token, l.superseded
),
created AS (
    INSERT INTO {table} AS l (key, owner, held_until, token, superseded, acquired_at)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond',
           (SELECT base FROM base) + nextval('{table:token_seq}'), false, now()
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE key = $1)
       AND (SELECT open FROM gate)
    ON CONFLICT (key) DO NOTHING
    RETURNING l.token, l.superseded
)
SELECT token, superseded FROM taken
UNION ALL
SELECT token, superseded FROM created
