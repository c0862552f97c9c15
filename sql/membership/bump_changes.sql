-- Moves the change counters of the processes whose units an operator changed, so that each re-reads
-- its units at its next tick. A statement of its own, with a snapshot taken after the change: the
-- changing statement's may predate a process row that already owns a changed unit. Moving a counter
-- twice only costs one more re-read, so it may be sent again.
-- $1 process ids.
UPDATE {processes} SET changes = changes + 1 WHERE process_id = ANY ($1::text[]::uuid[])
