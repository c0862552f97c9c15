-- The process's only steady-state write: extends its liveness and reports what it owns; hostname,
-- version and started_at are stored once. Also says whether the row had expired since the last beat,
-- or was gone (swept, or deleted: its units may be elsewhere; also true at a process's first beat).
-- It only ever extends: a heartbeat whose transaction began earlier (a late or resent one) must not
-- cut the expiry below what a later one granted, since the process's local deadline follows that.
-- $1 process id, $2 TTL in microseconds, $3 unit count, $4 owned weight, $5 hostname, $6 version.
WITH previous AS (
    SELECT expires_at FROM {processes} WHERE process_id = $1::uuid
),
beat AS (
    INSERT INTO {processes} AS p (process_id, expires_at, unit_count, weight, hostname, version, started_at)
    VALUES ($1::uuid, now() + $2::bigint * interval '1 microsecond', $3, $4, $5, $6, now())
    ON CONFLICT (process_id) DO UPDATE
       SET expires_at = greatest(p.expires_at, EXCLUDED.expires_at),
           unit_count = EXCLUDED.unit_count,
           weight = EXCLUDED.weight
    RETURNING p.expires_at
)
SELECT coalesce((SELECT expires_at <= now() FROM previous), true) AS lapsed,
       (SELECT expires_at FROM beat) AS expires_at
