-- One row per fleet (name). Renewals update only expires_at (no indexed column), so with the low
-- fillfactor they stay HOT updates. resign_requested asks the live leader to step down at its next
-- renewal (Elector::request_resign).
CREATE TABLE IF NOT EXISTS {table} (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    term       bigint      NOT NULL,
    elected_at timestamptz NOT NULL,
    resign_requested boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50)
