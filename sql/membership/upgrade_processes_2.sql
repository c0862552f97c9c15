-- Version 2: changes, the counter of changes others made to a process's units (it re-reads them only
-- when it moved). A constant default: no table rewrite.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS changes bigint NOT NULL DEFAULT 0
