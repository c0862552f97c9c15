-- Renews the fleet's leadership when this holder has it under the term it knows ($4), takes it when
-- free or expired by the database clock; a new tenure draws a new term. The term guard means an
-- elector renews only the tenure it won: another elector with the same holder name can never hand it
-- a term silently, and an elector that knows no term only takes a free or expired row. Anyone else's
-- poll while a leader is live matches nothing and skips the insert: no write. A renewal only ever
-- extends: one whose transaction began earlier (a resent poll) never cuts a later one's expiry. No row back: not the
-- leader. $1 name, $2 holder, $3 TTL in microseconds, $4 the term this elector holds, or null.
WITH taken AS (
    UPDATE {table} AS e
       SET term = CASE WHEN e.holder = $2 AND e.term = $4 AND e.expires_at > now() THEN e.term
                       ELSE nextval('{table:term_seq}') END,
           elected_at = CASE WHEN e.holder = $2 AND e.term = $4 AND e.expires_at > now()
                             THEN e.elected_at ELSE now() END,
           holder = $2,
           expires_at = greatest(CASE WHEN e.expires_at > now() THEN e.expires_at END,
                                 now() + $3::bigint * interval '1 microsecond')
     WHERE e.name = $1
       AND (e.expires_at <= now() OR (e.holder = $2 AND e.term = $4))
    RETURNING e.term
),
created AS (
    INSERT INTO {table} AS e (name, holder, expires_at, term, elected_at)
    SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', nextval('{table:term_seq}'), now()
     WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE name = $1)
    ON CONFLICT (name) DO NOTHING
    RETURNING e.term
)
SELECT term FROM taken
UNION ALL
SELECT term FROM created
