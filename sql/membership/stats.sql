-- What the fair share is computed from, in one round trip and never by scanning units: live processes
-- and the weight they report (in all, and the least: is one starving?), the unowned weight (claimable index), the weight expired processes still
-- own (their rows' reported weight, which claims of their units decrement), and whether this process
-- itself is live, and the counter of changes others made to its units.
-- $1 process id.
SELECT (SELECT count(*) FROM {processes} WHERE expires_at > now()) AS live,
       (SELECT coalesce(sum(weight), 0)::bigint FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others_weight,
       (SELECT min(weight)::bigint FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others_min_weight,
       (SELECT coalesce(sum(weight), 0)::bigint FROM {units}
         WHERE process_id IS NULL AND weight > 0) AS unowned_weight,
       (SELECT coalesce(sum(greatest(weight, 0)), 0)::bigint FROM {processes}
         WHERE expires_at <= now()) AS orphaned_weight,
       coalesce((SELECT expires_at > now() FROM {processes} WHERE process_id = $1::uuid), false) AS live_self,
       (SELECT changes FROM {processes} WHERE process_id = $1::uuid) AS changes
