-- Every fleet's row, live or expired, in name order, for operators (it reads the whole table, one row
-- per fleet); live by the database clock. No arguments.
SELECT name, holder, term, elected_at, expires_at, expires_at > now() AS live, resign_requested
  FROM {table}
 ORDER BY name
