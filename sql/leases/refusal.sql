-- Why an acquire of the key was refused, read just after it: the key's row as holder.sql reads it
-- (NULLs when the key has none), and, while grants of lapsed and absent keys wait out a promotion
-- of the server ({table:promotion}, see acquire.sql), when they resume for a grant whose TTL is no
-- longer than the longest asked for. Always one row.
-- $1 key.
SELECT l.key, l.owner, l.token, l.acquired_at, l.held_until, l.superseded,
       l.held_until > now() AS live, coalesce(l.managed_token = l.token, false) AS managed,
       (SELECT greatest(p.grants_from, p.seen_at + p.longest_ttl * interval '1 microsecond')
          FROM {table:promotion} AS p
         WHERE greatest(p.grants_from, p.seen_at + p.longest_ttl * interval '1 microsecond')
               > now()) AS grants_from
  FROM (SELECT $1::text AS key) AS wanted
  LEFT JOIN {table} AS l ON l.key = wanted.key
