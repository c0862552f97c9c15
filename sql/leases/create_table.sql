-- One row per key. Renewals update only held_until (no indexed column) and the low fillfactor leaves
-- room on each page, so renewals stay HOT updates; the primary key is the only index.
CREATE TABLE IF NOT EXISTS {table} (
    key         text        PRIMARY KEY,
    owner       text        NOT NULL,
    held_until  timestamptz NOT NULL,
    token       bigint      NOT NULL,
    superseded  boolean     NOT NULL DEFAULT false,
    acquired_at timestamptz NOT NULL
) WITH (fillfactor = 50)
