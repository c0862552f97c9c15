-- Version 3: settled, whether a process has shown it stays (heartbeat.sql). The default is true, so
-- the rows of processes that never write it (existing rows, and processes of version 2, which insert
-- without it) count at once, as they did before.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS settled boolean NOT NULL DEFAULT true
