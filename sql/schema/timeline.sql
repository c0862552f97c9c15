-- Whether this server can fold its timeline into fencing tokens: WAL functions answer on a primary
-- (some managed services refuse them, Aurora among them). NULL on a standby, which decides nothing.
SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_walfile_name(pg_current_wal_lsn()) END AS walfile
