-- Why an acquire of the key was refused, read just after it: the key's row as holder.sql reads it
-- (NULLs when the key has none), and, while grants of lapsed and absent keys wait out a promotion
-- of the server ({table:promotion}, see acquire.sql), when they resume. Always one row.
-- $1 key.
SELECT l.key, l.owner, l.token, l.acquired_at, l.held_until, l.superseded,
       l.held_until > now() AS live,
       (SELECT p.grants_from FROM {table:promotion} AS p WHERE p.grants_from > now()) AS grants_from
  FROM (SELECT $1::text AS key) AS wanted
  LEFT JOIN {table} AS l ON l.key = wanted.key
