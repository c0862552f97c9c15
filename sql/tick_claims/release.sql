-- Ends a claim's busy period early so the next tick can be claimed at once. Guarded by owner and
-- token, so a stale claim can never free a later one; a lapsed claim matches nothing and writes nothing.
UPDATE {table}
   SET busy_until = NULL
 WHERE job_id = $1
   AND owner = $2
   AND token = $3
   AND busy_until > now()
RETURNING 1
