-- Run inside the caller's transaction before a write only the leader may make. clock_timestamp(), not
-- now(): now() is the start of a possibly long transaction. FOR SHARE makes a new election (an UPDATE
-- of the row) wait until the caller's transaction ends, so a stale leader never commits after a newer
-- term began. $1 name, $2 holder, $3 term.
SELECT 1
  FROM {table}
 WHERE name = $1
   AND holder = $2
   AND term = $3
   AND expires_at > clock_timestamp()
   FOR SHARE
