-- One row per permit slot of a key: slots 0 to N - 1 hold a key's N permits, so the primary key
-- itself keeps a key from ever having more than N live permits among the slots below N. A permit's
-- columns are a lease's (key, owner, held_until, token, superseded, managed_token): a held permit
-- renews, fences and releases with the lease statements (sql/leases/renew_tenure.sql, fence.sql,
-- release.sql), which find it by key, owner and token. Every permit is a managed tenure
-- (managed_token = token); superseded stays false. Renewals update only held_until (no indexed
-- column) and the low fillfactor leaves room on each page, so renewals stay HOT updates.
CREATE TABLE IF NOT EXISTS {table} (
    key           text        NOT NULL,
    slot          integer     NOT NULL CHECK (slot >= 0),
    owner         text        NOT NULL,
    held_until    timestamptz NOT NULL,
    token         bigint      NOT NULL,
    superseded    boolean     NOT NULL DEFAULT false,
    acquired_at   timestamptz NOT NULL,
    managed_token bigint,
    PRIMARY KEY (key, slot)
) WITH (fillfactor = 50)
