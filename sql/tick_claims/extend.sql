-- Keeps a run's job busy: moves busy_until to at least now() + $4 while the claim is still the job's
-- latest and busy. Owner and token guard it, so a lapsed, released or taken claim matches nothing and
-- writes nothing. $1 job_id, $2 owner, $3 token, $4 busy period in microseconds.
UPDATE {table}
   SET busy_until = greatest(busy_until, now() + $4::bigint * interval '1 microsecond')
 WHERE job_id = $1
   AND owner = $2
   AND token = $3
   AND busy_until > now()
RETURNING 1
