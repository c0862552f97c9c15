-- After a promotion of a standby, when {table}'s grants may resume. One row, written only when a
-- grant finds the server on a timeline the record does not name, or first asks for a TTL longer
-- than any before it (sql/schema/promotion.sql); grants read it once per Db and table, and then
-- pass what they read as parameters.
-- timeline: the server timeline last seen (as of the table's creation until a grant sees another
-- one; 0 when made by a Db whose tokens do not fold in the timeline, until one whose tokens do
-- reads it, which holds nothing off for that). seen_at: when a grant first saw it
-- (NULL: as of creation, nothing to wait for). grants_from: no key or leadership that has lapsed
-- (or has no row) is granted before it, nor before seen_at plus the asking grant's own TTL; the
-- first grant to see a new timeline sets it one longest TTL ahead, so that every holder that
-- renewed on the old primary, in writes the promoted standby never received, has passed its local
-- deadline before anyone else is granted what it believes it holds. longest_ttl: the longest TTL
-- asked for, in microseconds.
CREATE TABLE IF NOT EXISTS {table:promotion} (
    only_row    boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    timeline    bigint      NOT NULL,
    seen_at     timestamptz,
    grants_from timestamptz,
    longest_ttl bigint      NOT NULL
)
