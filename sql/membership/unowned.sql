-- The enabled units no live process owns (claimable: unowned, or owned by an expired process), counted
-- through the claimable and owner indexes, so its cost follows the claimable set, not the table.
SELECT count(*) AS units, coalesce(sum(weight), 0)::bigint AS weight
  FROM (SELECT weight FROM {units} WHERE process_id IS NULL AND weight > 0
        UNION ALL
        SELECT u.weight FROM {processes} p JOIN {units} u ON u.process_id = p.process_id
         WHERE p.expires_at <= now() AND u.weight > 0) claimable
