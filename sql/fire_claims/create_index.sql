-- Serves purge(): it deletes by expires_at, which no other index covers.
CREATE INDEX IF NOT EXISTS {index:expires_at} ON {table} (expires_at)
