-- Inside the caller's transaction: whether this process still owns the unit with the token of its
-- claim, and is live by the clock now (clock_timestamp(), not the transaction's start: a transaction
-- begun before a pause must not pass on the old time). The unit's row is locked FOR SHARE first
-- (it may wait for a statement that locked it), and the liveness judged after that lock, per row,
-- on the clock then. The lock holds until the caller's transaction ends: a claimer skips a locked
-- unit (claim.sql) and takes it only afterwards, so a write fenced here commits before the unit can
-- change hands. The liveness is read from the statement's snapshot; expiries only grow, so a process
-- it shows live is live.
-- $1 process id (text, cast here: a driver that infers parameter types binds it as text, as it
-- is documented), $2 tenant, $3 shard, $4 token.
WITH locked AS MATERIALIZED (
    SELECT u.process_id
      FROM {units} u
     WHERE u.tenant = $2 AND u.shard = $3
       AND u.process_id = $1::text::uuid AND u.token = $4
       FOR SHARE OF u
)
SELECT true AS owned
  FROM locked l
 WHERE EXISTS (SELECT 1 FROM {processes} p
                WHERE p.process_id = l.process_id AND p.expires_at > clock_timestamp())
