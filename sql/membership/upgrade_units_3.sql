-- Version 3: removed, a unit unregistered while a live owner may still work on it. A constant
-- default: no table rewrite.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS removed boolean NOT NULL DEFAULT false
