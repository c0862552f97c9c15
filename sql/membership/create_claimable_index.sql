-- The unowned, enabled units in slot order: a claim reads only what it can take, so its cost follows
-- the claimable set, not the table (it stays empty once every unit is owned).
CREATE INDEX IF NOT EXISTS {index:claimable} ON {table} (slot) INCLUDE (weight)
    WHERE process_id IS NULL AND weight > 0
