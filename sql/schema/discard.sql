-- Ends this connection's own session, so that the pool drops the connection: used when a cancel
-- request may still be on its way to this backend and would hit the next statement run there.
SELECT pg_terminate_backend(pg_backend_pid())
