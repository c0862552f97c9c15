-- Run inside the caller's transaction before a write only this tick's run may make: the job's row
-- still carries this owner's claim token and its busy period has not lapsed by clock_timestamp()
-- (not now(): the start of a possibly long transaction). FOR SHARE makes a later claim of the job
-- (an UPDATE of the row) wait until the caller's transaction ends, so a stale run never commits after
-- the next tick's run began; a release (which ends the busy period) waits too.
-- $1 job_id, $2 owner, $3 token.
SELECT 1
  FROM {table}
 WHERE job_id = $1
   AND owner = $2
   AND token = $3
   AND busy_until > clock_timestamp()
   FOR SHARE
