-- One row per (tenant, shard). A unit is owned while process_id names a live process: holding units
-- costs no writes. slot is a random position that spreads concurrent claimers over the claimable set.
-- removed marks a unit unregistered while a live owner may still work on it: disabled (weight 0),
-- never claimed, deleted by its owner when it gives it back. token is the fencing token of the unit's
-- latest claim, drawn from the units table's sequence (NULL until first claimed).
CREATE TABLE IF NOT EXISTS {table} (
    tenant     text        NOT NULL,
    shard      integer     NOT NULL,
    process_id uuid,
    claimed_at timestamptz,
    weight     integer     NOT NULL DEFAULT 1 CHECK (weight >= 0),
    slot       integer     NOT NULL DEFAULT (random() * 2147483647)::integer,
    removed    boolean     NOT NULL DEFAULT false,
    token      bigint,
    PRIMARY KEY (tenant, shard)
)
