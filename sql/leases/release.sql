-- Ends this owner's live lease now (keeping the row, so the update is HOT and the token history
-- stays), guarded by owner and, when $3 is not null, by token. Shaped like release_and_sweep.sql,
-- which the caller sends instead at most once a minute. Without a token (a raw release by key) it
-- leaves a tenure a managed lease holds (managed_token = token) alone, even under the same owner
-- name: that lease releases it with its token, or an operator force-releases it.
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
)
SELECT EXISTS (SELECT 1 FROM released) AS released,
       (SELECT count(*) FROM notified) AS notified,
       0::bigint AS swept
