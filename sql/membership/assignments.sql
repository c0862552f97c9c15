-- Every registered unit, its weight and its owner, for operators (reads the whole units table). The
-- owner is the process the row names, live or not: a unit of an expired process is claimable.
SELECT u.tenant, u.shard, u.weight, u.process_id::text AS owner, u.token, u.claimed_at,
       coalesce(p.expires_at > now(), false) AS owner_live
  FROM {units} u
  LEFT JOIN {processes} p ON p.process_id = u.process_id
 WHERE NOT u.removed
 ORDER BY u.tenant, u.shard
