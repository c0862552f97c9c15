-- Reads the table's promotion record for a grant about to be sent, first updating it when the
-- server is on another timeline than the record names (a promotion: grants of lapsed and absent
-- keys wait one longest TTL from now, see create_promotion.sql) or when the grant asks for a TTL
-- longer than any before ($1). Sent once per Db and table, again after a grant answers that the
-- server's timeline is not the one it was given, and before a grant with a longer TTL; only by Dbs
-- whose tokens fold in the timeline. A record made by a Db whose tokens did not (timeline 0) learns
-- the timeline without holding anything off. Concurrent first sights: the row lock makes one update
-- it; the others re-check the new row version, match nothing, and return their snapshot's row,
-- which names the old timeline: their next grant is answered the same way and reads again.
-- $1 TTL in microseconds. Returns the record and the server's timeline.
WITH epoch AS (
    SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS timeline
),
updated AS (
    UPDATE {table:promotion} AS p
       SET timeline = e.timeline,
           seen_at = CASE WHEN e.timeline <> p.timeline AND p.timeline > 0 THEN now()
                          ELSE p.seen_at END,
           grants_from = CASE WHEN e.timeline <> p.timeline AND p.timeline > 0
                              THEN greatest(p.grants_from,
                                            now() + p.longest_ttl * interval '1 microsecond')
                              ELSE p.grants_from END,
           longest_ttl = greatest(p.longest_ttl, $1)
      FROM epoch AS e
     WHERE e.timeline <> p.timeline OR $1 > p.longest_ttl
    RETURNING p.timeline, p.seen_at, p.grants_from, p.longest_ttl
)
SELECT timeline, seen_at, grants_from, longest_ttl, (SELECT timeline FROM epoch) AS server_timeline
  FROM updated
UNION ALL
SELECT p.timeline, p.seen_at, p.grants_from, p.longest_ttl, (SELECT timeline FROM epoch)
  FROM {table:promotion} AS p
 WHERE NOT EXISTS (SELECT 1 FROM updated)
