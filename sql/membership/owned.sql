-- The database's truth about what this process owns, through the owner index. FOR SHARE waits for a
-- claim of these rows that is still in flight (another process taking them while this one was
-- expired) and re-checks the owner on the version it commits, so a process that just came back
-- never adopts a unit that is being taken from it. Runs only when the local view may be stale. mark
-- is the row's part of the digest stats.sql reads (the same expression).
-- $1 process id.
SELECT tenant, shard, weight, token, removed,
       hashint8(coalesce(token, 0)) # hashtext(tenant) # shard # weight AS mark
  FROM {units} WHERE process_id = $1::uuid FOR SHARE
