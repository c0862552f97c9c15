-- An operator's release: ends whoever's live tenure of the key now, not guarded by owner. The row
-- stays (tokens stay monotonic) with a fresh token from the sequence that no holder has: a renewal or
-- fence of the ended tenure fails on its token even if its transaction began before this one (its
-- now() earlier than the new held_until). Nothing to end matches nothing and writes nothing.
-- $1 key, $2 fold the server's timeline into new tokens, $3 the table's handover channel or null:
-- when set, a release that ended a live tenure tells the waiters of the key (pg_notify, sent at
-- commit; a notification only wakes a poll, which decides).
-- epoch: with $2, tokens are (timeline - 1) * 2^48 + a sequence value. The server's timeline grows
-- with every promotion of a standby, so every token drawn after one is above every token drawn
-- before it, even those whose WAL an asynchronous standby never received (its sequence went back;
-- the timeline did not). On the first timeline the epoch is 0. Without $2 (servers that refuse WAL
-- functions, such as Aurora) the epoch is always 0.
WITH epoch AS (
    SELECT CASE WHEN $2::boolean
                THEN (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint - 1)
                     << 48
                ELSE 0 END AS base
),
released AS (
    UPDATE {table}
       SET held_until = now(),
           token = greatest(token + 1, (SELECT base FROM epoch) + nextval('{table:token_seq}')),
           superseded = false
     WHERE key = $1
       AND held_until > now()
    RETURNING owner
),
notified AS (
    SELECT pg_notify($3, $1) FROM released WHERE $3::text IS NOT NULL
)
SELECT owner, (SELECT count(*) FROM notified) AS notified
  FROM released
