-- What pgtenure knows of a table's schema: whether it exists, its comment (where migrate records
-- "pgtenure: <kind> table, schema version N"), its columns and which of the relations named in $2
-- exist (for a table without a record, whose version is read from what it has). Catalog reads only:
-- sent once per Db and table, before the first statement a handle runs on it.
-- $1 the table (quoted, possibly schema-qualified), $2 relations derived from it.
SELECT to_regclass($1) IS NOT NULL AS present,
       obj_description(to_regclass($1), 'pg_class') AS comment,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY a.attnum) AS columns,
       ARRAY(SELECT n FROM unnest($2::text[]) AS n WHERE to_regclass(n) IS NOT NULL) AS relations
