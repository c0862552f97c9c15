-- How far the standby has received the primary's WAL (NULL before it received any), for the
-- harness's replication lag.
SELECT pg_last_wal_receive_lsn()::text
