-- What the relation named $1 (quoted, possibly schema-qualified) is, and whether it is an index on
-- the table $2: CREATE ... IF NOT EXISTS skips a name another relation already has, so create_table
-- checks that each index and sequence its statements need is really there. No row: none.
SELECT c.relkind::text AS kind,
       coalesce(i.indrelid = to_regclass($2), false) AS on_table
  FROM pg_class c
  LEFT JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.oid = to_regclass($1)
