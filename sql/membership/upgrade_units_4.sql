-- Version 4: token, the fencing token of a unit's latest claim (NULL until claimed again), drawn from
-- the sequence create_sequence.sql makes; that file follows this one.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS token bigint
