-- The live permits of every key that starts with $1, by key and slot, for operators (it reads the
-- whole table). starts_with, not LIKE: keys may contain % and _, which must match only themselves.
-- Whether a permit is live is decided here by the database clock.
-- $1 prefix ('' lists every key).
SELECT key, slot, owner, token, acquired_at, held_until
  FROM {table}
 WHERE starts_with(key, $1)
   AND held_until > now()
 ORDER BY key, slot
