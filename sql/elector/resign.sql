-- Ends this holder's live tenure now, guarded by holder and term, so an elector can end only the
-- tenure it won (never a newer one, nor one another elector with the same holder name won); the next
-- is_leader elsewhere wins without waiting. $1 name, $2 holder, $3 term, $4 the table's handover
-- channel or null: when set, a resignation that ended a live tenure tells the fleet's waiting
-- campaigns (pg_notify, sent at commit; a notification only wakes a poll, which decides).
WITH resigned AS (
    UPDATE {table}
       SET expires_at = now()
     WHERE name = $1
       AND holder = $2
       AND term = $3
       AND expires_at > now()
    RETURNING 1
),
notified AS (
    SELECT pg_notify($4, $1) FROM resigned WHERE $4::text IS NOT NULL
)
SELECT 1 AS resigned, (SELECT count(*) FROM notified) AS notified
  FROM resigned
