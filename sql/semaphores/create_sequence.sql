-- Fencing tokens come from a sequence, as for leases: every new tenure of any permit of any key gets
-- a larger token, and tokens never repeat, even after the sweep deletes long-lapsed rows.
CREATE SEQUENCE IF NOT EXISTS {table:token_seq} AS bigint
