-- A process's units, and the units of expired processes, found without scanning the table. Ordered by
-- slot within a process, so "the first N units of this process" is an index range: the planner has no
-- cheaper plan, whatever it guesses about how many processes expired.
CREATE INDEX IF NOT EXISTS {index:owner} ON {table} (process_id, slot) WHERE process_id IS NOT NULL
