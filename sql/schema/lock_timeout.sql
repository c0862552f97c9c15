-- Bounds how long each statement of a migration waits for a table lock, for this transaction only
-- (set after pgtenure's advisory lock is taken, so waiting for that lock is not bounded). An
-- ALTER TABLE waiting for its ACCESS EXCLUSIVE lock behind a long transaction (a fenced write, a
-- listing, pg_dump) queues every later statement on the table behind it: with this bound the
-- fleet's statements wait at most this long, the migration rolls back (55P03) and tries again.
-- $1 the timeout, as lock_timeout takes it ('100ms').
SELECT set_config('lock_timeout', $1, true)
