-- Version 2: claim_id, the random id of the call that won the fire key, so a claim whose answer was
-- lost finds out that it won. Nullable, no default: instantaneous, and version 1 statements ignore it.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS claim_id bigint
