-- Unit fencing tokens come from a sequence, not from token + 1, so they never repeat for a unit even
-- after its row is deleted and added again: every claim of any unit gets a larger token.
CREATE SEQUENCE IF NOT EXISTS {table:token_seq} AS bigint
