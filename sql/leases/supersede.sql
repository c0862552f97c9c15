-- Flags a live lease as wanted by a contender; its holder learns it at its next renewal and should
-- stop and release. The contender still acquires only after release or lapse. A lease already
-- flagged is reported without writing again.
-- $1 key.
WITH flagged AS (
    UPDATE {table}
       SET superseded = true
     WHERE key = $1
       AND held_until > now()
       AND NOT superseded
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM flagged)
    OR EXISTS (SELECT 1 FROM {table} WHERE key = $1 AND held_until > now() AND superseded)
