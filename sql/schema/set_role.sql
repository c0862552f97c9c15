-- Acts as the role $1 (the table's owner, owner.sql) until the migration's transaction ends.
SELECT set_config('role', $1, true)
