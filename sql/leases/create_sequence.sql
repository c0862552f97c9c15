-- Fencing tokens come from a sequence, not from token + 1, so they never repeat for a key even after
-- release()'s cleanup deletes the key's row: every new tenure of any key gets a larger token.
CREATE SEQUENCE IF NOT EXISTS {table:token_seq} AS bigint
