-- The table at a glance, for monitoring (the exporter's scrape): how many rows, how many held now and
-- how many of those superseded, when the next held lease lapses, and the $1 held leases closest to
-- lapsing, soonest first (then by key). One row and NULL lease columns when none is sent. It reads
-- the whole table once, on the server, and sends at most $1 rows: the cost of a scrape does not grow
-- with the rows sent. One now() for every comparison (the transaction's).
-- $1 how many held leases to send (0 for none).
WITH counts AS (
    SELECT count(*) AS lease_rows,
           count(*) FILTER (WHERE held_until > now()) AS held,
           count(*) FILTER (WHERE held_until > now() AND superseded) AS held_superseded,
           min(held_until) FILTER (WHERE held_until > now()) AS next_lapse
      FROM {table}
), soonest AS (
    SELECT key, owner, token, acquired_at, held_until, superseded, true AS live,
           coalesce(managed_token = token, false) AS managed
      FROM {table}
     WHERE held_until > now()
     ORDER BY held_until, key
     LIMIT $1
)
SELECT counts.lease_rows, counts.held, counts.held_superseded, counts.next_lapse,
       soonest.key, soonest.owner, soonest.token, soonest.acquired_at, soonest.held_until,
       soonest.superseded, soonest.live, soonest.managed
  FROM counts LEFT JOIN soonest ON true
 ORDER BY soonest.held_until, soonest.key
