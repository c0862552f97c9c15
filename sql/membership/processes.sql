-- Every process row, live or expired (not yet swept), with what it reports owning and whether it
-- has settled (counts in the fair share), for operators.
SELECT process_id::text AS process_id, hostname, version, started_at, expires_at,
       expires_at > now() AS live, settled, unit_count, weight
  FROM {processes}
 ORDER BY started_at, process_id
