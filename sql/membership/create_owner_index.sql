-- A process's units, and the units of expired processes, found without scanning the table.
CREATE INDEX IF NOT EXISTS {index:owner} ON {table} (process_id) WHERE process_id IS NOT NULL
