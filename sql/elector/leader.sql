-- Who leads the fleet now by the database clock, for operators; no row when nobody does.
-- $1 name.
SELECT holder, term, elected_at, expires_at, resign_requested
  FROM {table}
 WHERE name = $1
   AND expires_at > now()
