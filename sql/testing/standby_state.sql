-- The harness's standby as the primary sees it: streaming or not, and sync or async, so a test
-- starts only once replication runs the way it asked for. $1 the standby's application_name.
SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1
