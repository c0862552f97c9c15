-- Ends this holder's live tenure now, guarded by holder and, when $3 is not null, by term, so a
-- stale elector cannot end a newer tenure; the next is_leader elsewhere wins without waiting.
-- $1 name, $2 holder, $3 term or null.
UPDATE {table}
   SET expires_at = now()
 WHERE name = $1
   AND holder = $2
   AND ($3::bigint IS NULL OR term = $3)
   AND expires_at > now()
RETURNING 1
