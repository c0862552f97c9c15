-- The table at a glance, for monitoring (the exporter's scrape): how many keys have a row, how many
-- have a live permit, how many permits are live now, and the $1 keys with the most live permits (then by key), each with its live
-- permits and its slots (the highest slot ever taken, plus one: the most permits its acquirers have
-- needed at once; the table does not record the limit they asked for). One row with NULL key columns
-- first, for the counts. It reads the whole table once, on the server, and sends at most $1 + 1 rows.
-- One now() for every comparison (the transaction's).
-- $1 how many keys to send (0 for none).
WITH per_key AS (
    SELECT key, count(*) FILTER (WHERE held_until > now()) AS held, max(slot) + 1 AS slots
      FROM {table}
     GROUP BY key
), busiest AS (
    SELECT key, held, slots
      FROM per_key
     WHERE held > 0
     ORDER BY held DESC, key
     LIMIT $1
)
SELECT count(*) AS keys, count(*) FILTER (WHERE held > 0) AS held_keys,
       coalesce(sum(held), 0)::bigint AS held, NULL::text AS key, NULL::integer AS slots
  FROM per_key
UNION ALL
SELECT NULL, NULL, held, key, slots
  FROM busiest
