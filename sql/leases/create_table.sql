-- One row per key. Renewals update only held_until (no indexed column) and the low fillfactor leaves
-- room on each page, so renewals stay HOT updates; the primary key is the only index. managed_token:
-- the token of the tenure a managed lease holds (held by a managed lease while it equals token; see
-- acquire.sql and upgrade_3.sql).
CREATE TABLE IF NOT EXISTS {table} (
    key           text        PRIMARY KEY,
    owner         text        NOT NULL,
    held_until    timestamptz NOT NULL,
    token         bigint      NOT NULL,
    superseded    boolean     NOT NULL DEFAULT false,
    acquired_at   timestamptz NOT NULL,
    managed_token bigint
) WITH (fillfactor = 50)
