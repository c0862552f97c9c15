-- What the fair share is computed from, in one round trip and without scanning units: live processes
-- and the weight they report, the unowned weight (claimable index) and the weight of units whose
-- process expired (owner index), and whether this process itself is live.
-- $1 process id.
SELECT (SELECT count(*) FROM {processes} WHERE expires_at > now()) AS live,
       (SELECT coalesce(sum(weight), 0)::bigint FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others_weight,
       (SELECT coalesce(sum(weight), 0)::bigint FROM {units}
         WHERE process_id IS NULL AND weight > 0) AS unowned_weight,
       (SELECT coalesce(sum(u.weight), 0)::bigint FROM {units} u
         WHERE u.process_id IN (SELECT process_id FROM {processes} WHERE expires_at <= now())
           AND u.weight > 0) AS orphaned_weight,
       coalesce((SELECT expires_at > now() FROM {processes} WHERE process_id = $1::uuid), false) AS live_self
