-- What a tick decides from, in one read-only round trip: every other live process and the weight it
-- reports (every process computes the same targets from them), the unowned weight (claimable index),
-- the weight expired processes still own (their rows' reported weight, which claims of their units
-- decrement), whether this process itself is live, the counter of changes others made to its units,
-- and a digest of the rows that name it (count and sum of marks, through the owner index; the mark is
-- the one owned.sql and claim.sql return): a change nobody counted, such as an operator's UPDATE
-- moving a unit to another process, shows as a digest the local view does not have. Whether each
-- live process, this one included, has settled (heartbeated twice): the fair share counts only
-- those, and those that own units. $1 process id.
SELECT (SELECT count(*) FROM {processes} WHERE expires_at > now()) AS live,
       (SELECT coalesce(array_agg(process_id::text ORDER BY process_id), '{}') FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others,
       (SELECT coalesce(array_agg(weight ORDER BY process_id), '{}') FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others_weights,
       (SELECT coalesce(array_agg(settled ORDER BY process_id), '{}') FROM {processes}
         WHERE expires_at > now() AND process_id <> $1::uuid) AS others_settled,
       (SELECT coalesce(sum(weight), 0)::bigint FROM {units}
         WHERE process_id IS NULL AND weight > 0) AS unowned_weight,
       (SELECT coalesce(sum(greatest(weight, 0)), 0)::bigint FROM {processes}
         WHERE expires_at <= now()) AS orphaned_weight,
       coalesce((SELECT expires_at > now() FROM {processes} WHERE process_id = $1::uuid), false) AS live_self,
       coalesce((SELECT settled FROM {processes} WHERE process_id = $1::uuid), false) AS settled_self,
       (SELECT changes FROM {processes} WHERE process_id = $1::uuid) AS changes,
       mine.units AS owned_units, mine.marks AS owned_marks
  FROM (SELECT count(*) AS units,
               coalesce(sum(hashint8(coalesce(token, 0)) # hashtext(tenant) # shard # weight), 0)::bigint AS marks
          FROM {units} WHERE process_id = $1::uuid) mine
