-- Version 2: the owner index ordered by slot within a process (create_owner_index.sql), replacing one
-- on process_id alone. Replaced only when it lacks slot, so running it again changes nothing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1
                     FROM pg_index i
                     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
                    WHERE i.indexrelid = to_regclass('{table:owner}') AND a.attname = 'slot') THEN
        DROP INDEX IF EXISTS {table:owner};
        CREATE INDEX {index:owner} ON {table} (process_id, slot) WHERE process_id IS NOT NULL;
    END IF;
END
$$
