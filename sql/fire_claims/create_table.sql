-- One row per fire key. Rows are per fire, so the table grows until purge() deletes long-expired
-- claims; the expires_at index keeps that purge from scanning the whole table. claim_id is the
-- random id of the call that won, so a claim whose answer was lost can find out that it won.
CREATE TABLE IF NOT EXISTS {table} (
    fire_key   text        PRIMARY KEY,
    holder     text        NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    claim_id   bigint
)
