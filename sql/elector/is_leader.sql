-- Renews the fleet's leadership when this holder has it under the term it knows ($4), takes it when
-- free or expired by the database clock; a new tenure draws a new term. The term guard means an
-- elector renews only the tenure it won: another elector with the same holder name can never hand it
-- a term silently, and an elector that knows no term only takes a free or expired row. Anyone else's
-- poll while a leader is live matches nothing and skips the insert: no write. A renewal only ever
-- extends: one whose transaction began earlier (a resent poll) never cuts a later one's expiry. A
-- renewal that finds a resignation requested (Elector::request_resign) neither extends nor ends the
-- tenure: it leaves the expiry (and the request) as they were and answers ended, so the leader
-- stops believing first and then resigns with its term (resign.sql); if it dies in between, the old
-- expiry frees the row. The database never frees a leadership its holder may still believe in.
-- Returns one row: this holder's tenure (mine: it leads now; ended: it was asked to step down and
-- must resign), or else the live leader as this statement's snapshot saw it; the stale row below;
-- a row of nulls when nobody leads (with held_off_us, below). holder, term, elected_at and
-- expires_at describe the leader (NULL after an ended tenure; my_term is then the term to resign).
-- $1 name, $2 holder, $3 TTL in microseconds, $4 the term this elector holds, or null, $5 fold the
-- server's timeline into new tokens, $6 hold elections off after a promotion, $7 $8 $9 the table's
-- promotion record as the caller last read it (sql/schema/promotion.sql): its timeline, when it was
-- first seen, when elections resume. $10 $11 see prefer.
-- epoch: with $5, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $5 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
-- gate: with $6, a lapsed or absent leadership is won only on the timeline the record names, from
-- when elections resume, and once this poll's own TTL has passed since the timeline was first seen.
-- A leader whose last renewals, or whose election, a promoted standby never received believes it
-- leads until its local deadline, at most one TTL after the old primary's last commit; the wait
-- outlasts it when that TTL reached the standby, or when this poll asks for one as long. A live
-- tenure's renewal is not held off.
-- prefer: after a promotion's hold-off, a lapsed leadership waits $10 more microseconds (the
-- poller's retry period, at most its TTL) for its last holder before another member may win it: a
-- healthy leader cut off by the failover re-takes it at its next poll, the others poll a retry
-- period later (the outage rule, src/outage.rs). A crashed leader's successor waits that much
-- longer once. The last holder is the row's, or a poller whose newest term won ($11, kept after its
-- tenure ended) is above the row's: it won a tenure after the one the row records, which an
-- asynchronous standby never received (terms only grow on one timeline, so on the old primary no
-- poller's is above its row's).
-- held_off_us: when the gate alone refused this poll (the leadership lapsed or absent, the server
-- on the record's timeline), in how many microseconds it opens for this holder; the campaign polls
-- again then rather than a turn later. Null otherwise.
-- stale: on a server whose timeline is not $7, the answer says so (and when nobody leads it is
-- only that): the caller reads the record again (recording the promotion if it is the first to see
-- it) and, unless this poll renewed or won, polls again. So the first poll of any kind after a
-- promotion starts the hold-off.
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
opens AS (
    -- When the hold-off ends for the last holder: null when nothing is held off.
    SELECT CASE WHEN $6::boolean AND (SELECT timeline FROM epoch) = $7::bigint
                THEN greatest($9::timestamptz,
                              $8::timestamptz + $3::bigint * interval '1 microsecond') END AS at
),
preferred AS (
    -- Whether a member other than the last holder may win a lapsed leadership (prefer).
    SELECT (SELECT open FROM gate)
       AND coalesce((SELECT at FROM opens) + $10::bigint * interval '1 microsecond' <= now(),
                    true) AS open_to_others
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
                                  AND e.resign_requested THEN e.expires_at
                             ELSE greatest(CASE WHEN e.expires_at > now() THEN e.expires_at END,
                                           now() + $3::bigint * interval '1 microsecond') END,
           resign_requested = coalesce(e.holder = $2 AND e.term = $4 AND e.expires_at > now()
                                       AND e.resign_requested, false)
     WHERE e.name = $1
       AND ((e.expires_at <= now()
             AND CASE WHEN e.holder = $2 OR e.term < $11::bigint THEN (SELECT open FROM gate)
                      ELSE (SELECT open_to_others FROM preferred) END)
            OR (e.holder = $2 AND e.term = $4 AND e.expires_at > now()))
    RETURNING e.holder, e.term, e.elected_at, e.expires_at,
              NOT e.resign_requested AS mine, e.resign_requested AS ended
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
    SELECT holder, term, elected_at, expires_at, mine, ended, false AS stale, 1 AS pick
      FROM taken
    UNION ALL
    SELECT holder, term, elected_at, expires_at, mine, false, false, 2 FROM created
    UNION ALL
    SELECT holder, term, elected_at, expires_at, false, false, false, 3
      FROM {table} WHERE name = $1 AND expires_at > now()
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, false, false, true, 4
     WHERE $6::boolean
       AND (SELECT timeline FROM epoch) <> $7::bigint
    UNION ALL
    SELECT NULL, NULL, NULL, NULL, false, false, false, 5
),
held_off AS (
    SELECT (extract(epoch FROM o.at - now()
                               + CASE WHEN e.holder IS NULL OR e.holder = $2 OR e.term < $11::bigint
                                      THEN interval '0'
                                      ELSE $10::bigint * interval '1 microsecond' END)
            * 1000000)::bigint AS us
      FROM opens AS o LEFT JOIN {table} AS e ON e.name = $1
     WHERE o.at IS NOT NULL
)
SELECT CASE WHEN ended THEN NULL ELSE holder END AS holder,
       CASE WHEN ended THEN NULL ELSE term END AS term,
       CASE WHEN ended THEN NULL ELSE elected_at END AS elected_at,
       CASE WHEN ended THEN NULL ELSE expires_at END AS expires_at,
       mine, ended, term AS my_term, EXISTS (SELECT 1 FROM outcome WHERE stale) AS stale,
       CASE WHEN pick = 5 AND (SELECT us FROM held_off) > 0
            THEN (SELECT us FROM held_off) END AS held_off_us
  FROM outcome
 ORDER BY pick
 LIMIT 1
