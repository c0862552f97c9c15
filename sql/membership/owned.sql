-- The database's truth about what this process owns, through the owner index.
-- $1 process id.
SELECT tenant, shard, weight FROM {units} WHERE process_id = $1::uuid
