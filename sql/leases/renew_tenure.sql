-- A managed lease's renewal: guarded by owner and token, so a stale tenure can never extend a newer
-- one of the same owner. It only ever extends: a renewal sent again after an unknown outcome can
-- commit after the first attempt, or the other way round, and the attempt whose transaction began
-- earlier (now() is its start) must not cut the lease below what the later one granted. No row back
-- means the lease is no longer ours.
-- stale: with $5 (the timeline of the promotion record the caller read, NULL when nothing is held
-- off), whether the server is on another timeline: the caller then reads the record again, the
-- first reader recording the promotion, so that the hold-off after a promotion starts at the first
-- renewal rather than at the first grant.
-- $1 key, $2 owner, $3 token, $4 TTL in microseconds, $5 the record's timeline, or null.
UPDATE {table}
   SET held_until = greatest(held_until, now() + $4::bigint * interval '1 microsecond')
 WHERE key = $1
   AND owner = $2
   AND token = $3
   AND held_until > now()
RETURNING superseded,
          $5::bigint IS NOT NULL
          AND ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
              <> $5::bigint AS stale
