-- Bytes of WAL the primary wrote past the position the standby received ($1), never negative.
SELECT greatest(pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn), 0)::float8
