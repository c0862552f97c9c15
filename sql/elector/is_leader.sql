-- Renews the fleet's leadership when this holder has it under the term it knows ($4), takes it when
-- free or expired by the database clock; a new tenure draws a new term. The term guard means an
-- elector renews only the tenure it won: another elector with the same holder name can never hand it
-- a term silently, and an elector that knows no term only takes a free or expired row. Anyone else's
-- poll while a leader is live matches nothing and skips the insert: no write. A renewal only ever
-- extends: one whose transaction began earlier (a resent poll) never cuts a later one's expiry. A
-- renewal that finds a resignation requested (Elector::request_resign) ends the tenure instead, in
-- the same statement, so the next poll elsewhere wins at once.
-- Returns at most one row: this holder's tenure (mine: it leads now; ended: it was asked to step
-- down and did), or else the live leader as this statement's snapshot saw it; no row when nobody
-- leads. holder, term, elected_at and expires_at describe the leader (NULL after an ended tenure).
-- $1 name, $2 holder, $3 TTL in microseconds, $4 the term this elector holds, or null, $5 fold the
-- server's timeline into new tokens, $6 hold grants off after a promotion.
-- epoch: with $5, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $5 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
-- promotion, gate: with $6, the first poll to see a new timeline records when it did
-- ({table:promotion}), and elections to a lapsed or absent leadership wait until both the longest
-- TTL ever asked for (as the promoted server knows it) and this poll's own TTL have passed since. A
-- leader whose last renewals, or whose election, the promoted standby never received believes it
-- leads until its local deadline, at most one TTL after the old primary's last commit; the wait
-- outlasts it when that TTL reached the standby, or when this poll asks for one as long. A
-- concurrent first sight that loses the row lock matches nothing (the re-checked row has the new
-- timeline) and reads the old row from its snapshot: closed as well. A live tenure's renewal is not
-- held off. Without $6 the record is kept but not obeyed. The record is written only by the first
-- poll to see a new timeline, leader's or not (once per promotion), and by a poll that may win or
-- renew with a TTL longer than any before: a follower's poll while a leader is live still writes
-- nothing.
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
                             WHERE l.name = $1 AND l.expires_at > now()
                               AND NOT coalesce(l.holder = $2 AND l.term = $4, false)))
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
    UPDATE {table} AS e
       SET term = CASE WHEN e.holder = $2 AND e.term = $4 AND e.expires_at > now() THEN e.term
                       ELSE greatest(e.term + 1, (SELECT base FROM base)
                                                 + nextval('{table:term_seq}')) END,
           elected_at = CASE WHEN e.holder = $2 AND e.term = $4 AND e.expires_at > now()
                             THEN e.elected_at ELSE now() END,
           holder = $2,
           expires_at = CASE WHEN e.holder = $2 AND e.term = $4 AND e.expires_at > now()
                                  AND e.resign_requested THEN now()
                             ELSE greatest(CASE WHEN e.expires_at > now() THEN e.expires_at END,
                                           now() + $3::bigint * interval '1 microsecond') END,
           resign_requested = false
     WHERE e.name = $1
       AND ((e.expires_at <= now() AND (SELECT open FROM gate))
            OR (e.holder = $2 AND e.term = $4 AND e.expires_at > now()))
    RETURNING e.holder, e.term, e.elected_at, e.expires_at, e.expires_at > now() AS mine
),
created AS (
    INSERT INTO {table} AS e (name, holder, expires_at, term, elected_at)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond',
           (SELECT base FROM base) + nextval('{table:term_seq}'), now()
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE name = $1)
       AND (SELECT open FROM gate)
    ON CONFLICT (name) DO NOTHING
    RETURNING e.holder, e.term, e.elected_at, e.expires_at, true AS mine
),
outcome AS (
    SELECT holder, term, elected_at, expires_at, mine, NOT mine AS ended, 1 AS pick FROM taken
    UNION ALL
    SELECT holder, term, elected_at, expires_at, mine, false, 2 FROM created
    UNION ALL
    SELECT holder, term, elected_at, expires_at, false, false, 3
      FROM {table} WHERE name = $1 AND expires_at > now()
)
SELECT CASE WHEN ended THEN NULL ELSE holder END AS holder,
       CASE WHEN ended THEN NULL ELSE term END AS term,
       CASE WHEN ended THEN NULL ELSE elected_at END AS elected_at,
       CASE WHEN ended THEN NULL ELSE expires_at END AS expires_at,
       mine, ended, term AS my_term
  FROM outcome
 ORDER BY pick
 LIMIT 1
