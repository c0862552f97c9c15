-- Releases as release.sql does, and deletes rows whose lease lapsed over an hour ago (left by
-- holders that stopped without releasing). The delete scans the table, so it is a statement of its
-- own, sent at most once a minute: folded into release.sql it would keep PostgreSQL from ever
-- choosing that statement's generic plan (planned once) over one planned for each call.
-- $4: the table's handover channel, or null: when set, a release that ended a live lease tells the
-- waiters of the key (pg_notify, sent at commit; a notification only wakes a poll, which decides).
-- $1 key, $2 owner, $3 token or null, $4 channel or null.
WITH released AS (
    UPDATE {table}
       SET held_until = now()
     WHERE key = $1
       AND owner = $2
       AND (($3::bigint IS NULL AND managed_token IS DISTINCT FROM token) OR token = $3)
       AND held_until > now()
    RETURNING 1
),
notified AS (
    SELECT pg_notify($4, $1) FROM released WHERE $4::text IS NOT NULL
),
swept AS (
    DELETE FROM {table}
     WHERE held_until < now() - interval '1 hour'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM released) AS released,
       (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM swept) AS swept
