-- An operator's release: ends whoever's live tenure of the key now, not guarded by owner. The row
-- stays (tokens stay monotonic) with a fresh token from the sequence that no holder has: a renewal or
-- fence of the ended tenure fails on its token even if its transaction began before this one (its
-- now() earlier than the new held_until). Nothing to end matches nothing and writes nothing.
-- $1 key.
UPDATE {table}
   SET held_until = now(),
       token = nextval('{table:token_seq}'),
       superseded = false
 WHERE key = $1
   AND held_until > now()
RETURNING owner
