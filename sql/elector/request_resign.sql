-- Asks the fleet's live leader to step down: its next renewal does not extend its tenure but tells
-- it to stop believing and resign (is_leader.sql), after which the next poll elsewhere wins. Nothing
-- when nobody leads. Returns the leader asked. $1 name.
UPDATE {table}
   SET resign_requested = true
 WHERE name = $1
   AND expires_at > now()
RETURNING holder, term
