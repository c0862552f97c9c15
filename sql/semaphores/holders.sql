-- The key's live permits, by slot, for operators and for a refused acquirer; whether a permit is live
-- is decided here by the database clock, never by the caller's. No row when nobody holds one.
-- $1 key.
SELECT key, slot, owner, token, acquired_at, held_until
  FROM {table}
 WHERE key = $1
   AND held_until > now()
 ORDER BY slot
