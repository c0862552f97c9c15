-- Promotes the standby and waits (up to 60 s) until it has left recovery.
SELECT pg_promote(true, 60)
