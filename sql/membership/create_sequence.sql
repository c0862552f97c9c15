-- Unit fencing tokens come from a sequence, not from token + 1, so they never repeat for a unit even
-- after its row is deleted and added again: every claim of any unit gets a larger token. Owned by the
-- token column, so dropping the units table drops it too.
CREATE SEQUENCE IF NOT EXISTS {table:token_seq} AS bigint OWNED BY {table}.token
