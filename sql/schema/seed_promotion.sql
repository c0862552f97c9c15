-- The promotion record's one row, as of the table's creation: the server's timeline now (0 when
-- tokens do not fold it in), and nothing held off.
INSERT INTO {table:promotion} (timeline, seen_at, grants_from, longest_ttl)
SELECT CASE WHEN {fold}
            THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
            ELSE 0 END,
       NULL, NULL, 0
ON CONFLICT DO NOTHING
