-- One row per fire key. Rows are per fire, so the table grows until purge() deletes long-expired
-- claims; the expires_at index keeps that purge from scanning the whole table.
CREATE TABLE IF NOT EXISTS {table} (
    fire_key   text        PRIMARY KEY,
    holder     text        NOT NULL,
    claimed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
)
