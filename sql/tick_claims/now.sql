-- The database clock, for a scheduler that has not claimed yet (every claim also returns it).
SELECT now() AS db_now
