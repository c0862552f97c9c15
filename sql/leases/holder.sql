-- The key's row as it stands, live or lapsed, for operators and for a refused acquirer; whether it is
-- live is decided here by the database clock, never by the caller's. No row when the key has none.
-- $1 key.
SELECT key, owner, token, acquired_at, held_until, superseded, held_until > now() AS live,
       coalesce(managed_token = token, false) AS managed
  FROM {table}
 WHERE key = $1
