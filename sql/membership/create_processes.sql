-- One row per process: its liveness (expires_at), what it owns (unit_count, weight), so the fair share
-- is computed from a few rows, never by scanning units, and a counter of changes others made to its
-- units (changes), so it re-reads them only when they changed, and whether it has shown it stays
-- (settled: it heartbeated a second time; see heartbeat.sql). Heartbeats touch no indexed column and
-- the low fillfactor keeps them HOT.
CREATE TABLE IF NOT EXISTS {table} (
    process_id uuid        PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    unit_count integer     NOT NULL DEFAULT 0,
    weight     bigint      NOT NULL DEFAULT 0,
    changes    bigint      NOT NULL DEFAULT 0,
    settled    boolean     NOT NULL DEFAULT true,
    hostname   text        NOT NULL,
    version    text        NOT NULL,
    started_at timestamptz NOT NULL
) WITH (fillfactor = 50)
