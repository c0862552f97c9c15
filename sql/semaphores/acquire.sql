-- Takes one permit of the key: the lowest lapsed slot below $4 (the permits this acquire allows),
-- else the lowest slot below $4 that has no row yet. The slot is the limit: the primary key
-- (key, slot) admits one row per slot, so no more than $4 permits below slot $4 are ever live, and
-- an acquire never looks at a slot at or above its own $4. Every grant is a new tenure with a new
-- token from the sequence and is marked managed (managed_token = token): a permit renews, fences
-- and releases with the lease statements, by key, owner and token.
-- Refused (every slot below $4 live): nothing matches, nothing is locked, the insert is skipped and
-- no sequence value is drawn: no write, no WAL flush.
-- Racing acquirers: a lapsed slot is locked FOR UPDATE SKIP LOCKED, and the lock re-checks the
-- newest row version, so a slot another acquirer is taking or has just taken is passed over for the
-- next. Two acquirers inserting the same missing slot: one inserts, the other's ON CONFLICT does
-- nothing, and its answer says contended (a slot looked free and was taken meanwhile): the caller
-- sends the acquire again, which then sees that slot taken and tries the next.
-- $1 key, $2 owner, $3 TTL in microseconds, $4 permits (slots 0 to $4 - 1), $5 fold the server's
-- timeline into new tokens, $6 hold grants off after a promotion, $7 $8 $9 the table's promotion
-- record as the caller last read it (sql/schema/promotion.sql).
-- epoch, gate, stale: as in sql/leases/acquire.sql. Tokens are (timeline - 1) * 2^48 + a sequence
-- value with $5; with $6 a lapsed or absent slot is granted only once a promotion's hold-off has
-- passed; on another timeline than $7 the answer has a row with stale true, and the caller reads
-- the record again and sends the acquire again. Live permits are not held off: they renew.
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
free AS (
    SELECT s.slot
      FROM {table} AS s
     WHERE s.key = $1
       AND s.slot < $4::integer
       AND s.held_until <= now()
       AND (SELECT open FROM gate)
     ORDER BY s.slot
     LIMIT 1
       FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE {table} AS s
       SET (token, managed_token) = (
               SELECT fresh.token, fresh.token
                 FROM (SELECT greatest(s.token + 1, (SELECT base FROM base)
                                                    + nextval('{table:token_seq}')) AS token) AS fresh),
           owner = $2,
           acquired_at = now(),
           superseded = false,
           held_until = now() + $3::bigint * interval '1 microsecond'
      FROM free
     WHERE s.key = $1
       AND s.slot = free.slot
    RETURNING s.slot, s.token
),
missing AS (
    SELECT wanted.slot
      FROM generate_series(0, $4::integer - 1) AS wanted(slot)
     WHERE NOT EXISTS (SELECT 1 FROM {table} AS s WHERE s.key = $1 AND s.slot = wanted.slot)
       AND NOT EXISTS (SELECT 1 FROM free)
       AND (SELECT open FROM gate)
     ORDER BY wanted.slot
     LIMIT 1
),
created AS (
    INSERT INTO {table} AS s (key, slot, owner, held_until, token, superseded, acquired_at,
                              managed_token)
    SELECT $1, fresh.slot, $2, now() + $3::bigint * interval '1 microsecond', fresh.token, false,
           now(), fresh.token
      FROM (SELECT missing.slot, (SELECT base FROM base) + nextval('{table:token_seq}') AS token
              FROM missing) AS fresh
    ON CONFLICT (key, slot) DO NOTHING
    RETURNING s.slot, s.token
)
SELECT slot, token, false AS stale, false AS contended FROM taken
UNION ALL
SELECT slot, token, false, false FROM created
UNION ALL
SELECT NULL, NULL, false, true
 WHERE EXISTS (SELECT 1 FROM missing)
   AND NOT EXISTS (SELECT 1 FROM created)
UNION ALL
SELECT NULL, NULL, true, false
 WHERE $6::boolean
   AND (SELECT timeline FROM epoch) <> $7::bigint
