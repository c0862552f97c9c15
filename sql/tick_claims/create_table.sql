-- One row per job id: it never grows with time. Claims update only unindexed columns, and the low
-- fillfactor leaves room on each page, so every claim and release is a HOT update.
CREATE TABLE IF NOT EXISTS {table} (
    job_id     text        PRIMARY KEY,
    tick       timestamptz NOT NULL,
    busy_until timestamptz,
    owner      text        NOT NULL,
    token      bigint      NOT NULL
) WITH (fillfactor = 50)
