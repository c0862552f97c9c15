-- Bounds a migration's transaction (set after pgtenure's advisory lock is taken, so waiting for that
-- lock is not bounded), for this transaction only:
-- lock_timeout: how long each statement waits for a table lock. An ALTER TABLE waiting for its
-- ACCESS EXCLUSIVE lock behind a long transaction (a fenced write, a listing, pg_dump) queues every
-- later statement on the table behind it: with this bound the fleet's statements wait at most this
-- long, the migration rolls back (55P03) and tries again.
-- idle_in_transaction_session_timeout: how long the transaction may wait for the client's next
-- statement. A migrating process paused (SIGSTOP, a frozen VM or container) after its ALTER TABLE
-- would otherwise hold the table's ACCESS EXCLUSIVE lock, and stop every instance's statements on
-- it, for as long as it is paused; the server ends its session instead, and the migration rolls back.
-- $1 the lock timeout ('100ms'), $2 the idle timeout ('2s').
SELECT set_config('lock_timeout', $1, true) AS lock_timeout,
       set_config('idle_in_transaction_session_timeout', $2, true) AS idle_timeout
