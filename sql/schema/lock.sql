-- Serializes pgtenure's DDL across every instance: concurrent CREATE TABLE IF NOT EXISTS can fail on
-- PostgreSQL's catalog. Transaction-level, so it is released at commit and never leaks through a pooler.
SELECT pg_advisory_xact_lock($1)
