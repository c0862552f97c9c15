-- Every row whose key starts with $1, live or lapsed, in key order, for operators (it reads the whole
-- table). starts_with, not LIKE: keys may contain % and _, which must match only themselves.
-- $1 prefix ('' lists every key).
SELECT key, owner, token, acquired_at, held_until, superseded, held_until > now() AS live,
       coalesce(managed_token = token, false) AS managed
  FROM {table}
 WHERE starts_with(key, $1)
 ORDER BY key
