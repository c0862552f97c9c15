-- The process's only steady-state write: extends its liveness and reports what it owns; hostname,
-- version and started_at are stored once. Also says whether the row had expired since the last beat,
-- or was gone (swept, or deleted: its units may be elsewhere; also true at a process's first beat).
-- It only ever extends: a heartbeat whose transaction began earlier (a late or resent one) must not
-- cut the expiry below what a later one granted, since the process's local deadline follows that.
-- A new row is settled only with $7 (no probation); a later beat settles it once the row has been
-- live for $9 microseconds since its first beat: a process counts in the fair share, and is shed to,
-- once it has shown it stays (a crash-looping slot's incarnations die before that and never count).
-- The count and weight are reported only by a process whose local view is known to match the
-- database ($8): one that has not read its units yet (restarted under its process id, or back from a
-- lapse) keeps what the row says, which claims and gives back keep true, instead of reporting zero:
-- the other processes compute their fair share from these, and would shed for a process that
-- seems to own nothing.
-- $1 process id, $2 TTL in microseconds, $3 unit count, $4 owned weight, $5 hostname, $6 version,
-- $7 settled from the first beat, $8 whether $3 and $4 are known, $9 the least age (microseconds)
-- at which a later beat settles the row.
WITH previous AS (
    SELECT expires_at FROM {processes} WHERE process_id = $1::uuid
),
beat AS (
    INSERT INTO {processes} AS p (process_id, expires_at, unit_count, weight, hostname, version,
                                  started_at, settled)
    VALUES ($1::uuid, now() + $2::bigint * interval '1 microsecond', $3, $4, $5, $6, now(), $7)
    ON CONFLICT (process_id) DO UPDATE
       SET expires_at = greatest(p.expires_at, EXCLUDED.expires_at),
           unit_count = CASE WHEN $8 THEN EXCLUDED.unit_count ELSE p.unit_count END,
           weight = CASE WHEN $8 THEN EXCLUDED.weight ELSE p.weight END,
           settled = p.settled OR p.started_at <= now() - $9::bigint * interval '1 microsecond'
    RETURNING p.expires_at, p.settled
)
SELECT coalesce((SELECT expires_at <= now() FROM previous), true) AS lapsed,
       (SELECT expires_at FROM beat) AS expires_at,
       (SELECT settled FROM beat) AS settled
