-- One row per job id: it never grows with time. Claims update only unindexed columns, and the low
-- fillfactor leaves room on each page, so every claim and release is a HOT update. claim_id is the
-- random id of the call that won the tick, so a claim whose answer was lost can find out.
CREATE TABLE IF NOT EXISTS {table} (
    job_id     text        PRIMARY KEY,
    tick       timestamptz NOT NULL,
    busy_until timestamptz,
    owner      text        NOT NULL,
    token      bigint      NOT NULL,
    claim_id   bigint
) WITH (fillfactor = 50)
