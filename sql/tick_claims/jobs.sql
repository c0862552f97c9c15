-- Every job's row: its last claimed tick, who claimed it and whether that run is busy by the database
-- clock, for operators (it reads the whole table, one row per job). No arguments.
SELECT job_id, tick, owner, token, busy_until,
       coalesce(busy_until > now(), false) AS busy
  FROM {table}
 ORDER BY job_id
