-- Ends this holder's live tenure now, guarded by holder and term, so an elector can end only the
-- tenure it won (never a newer one, nor one another elector with the same holder name won); the next
-- is_leader elsewhere wins without waiting. $1 name, $2 holder, $3 term.
UPDATE {table}
   SET expires_at = now()
 WHERE name = $1
   AND holder = $2
   AND term = $3
   AND expires_at > now()
RETURNING 1
