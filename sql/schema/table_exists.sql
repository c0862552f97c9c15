-- Whether the (quoted, possibly schema-qualified) table exists; an existing table is left as it is,
-- so a role without CREATE on the schema can still start once the tables are there.
SELECT to_regclass($1) IS NOT NULL
