-- The promotion record's one row, as of no grant yet: the first grant records the timeline it sees
-- without holding anything off (no grant before it can have been lost).
INSERT INTO {table:promotion} (timeline, grants_from, longest_ttl)
VALUES (0, '-infinity', 0)
ON CONFLICT DO NOTHING
