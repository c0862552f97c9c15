-- Terms come from a sequence, so they strictly increase across tenures of every fleet in the table,
-- whatever happens to the rows.
CREATE SEQUENCE IF NOT EXISTS {table:term_seq} AS bigint
