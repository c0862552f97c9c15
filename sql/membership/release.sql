-- Gives back every unit of this process in one statement (graceful shutdown), so the others claim
-- them at their next tick without waiting for a TTL.
-- $1 process id.
WITH released AS (
    UPDATE {units}
       SET process_id = NULL, claimed_at = NULL
     WHERE process_id = $1::uuid
    RETURNING tenant, shard
),
counted AS (
    UPDATE {processes} SET unit_count = 0, weight = 0 WHERE process_id = $1::uuid
)
SELECT tenant, shard FROM released
