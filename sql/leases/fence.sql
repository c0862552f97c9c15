-- Run inside the caller's transaction before a protected write. clock_timestamp(), not now(): now() is
-- the start of a possibly long transaction. FOR SHARE makes a takeover (an UPDATE of the row) wait
-- until the caller's transaction ends, so a stale holder can never commit after a new tenure began.
-- $1 key, $2 owner, $3 token.
SELECT 1
  FROM {table}
 WHERE key = $1
   AND owner = $2
   AND token = $3
   AND held_until > clock_timestamp()
   FOR SHARE
