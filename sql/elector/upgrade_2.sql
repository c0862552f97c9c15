-- Version 2: resign_requested, set by Elector::request_resign and read by the leader's renewal. A
-- constant default: no table rewrite, and version 1 statements (which never set it) keep working.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS resign_requested boolean NOT NULL DEFAULT false
