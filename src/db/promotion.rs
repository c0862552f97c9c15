//! The promotion record beside each lease and leader table (`sql/schema/create_promotion.sql`):
//! read once per [`Db`] and table, and passed to every grant as parameters, so that a grant's
//! statement never reads another table (see [`Db::with_promotion_hold_off`]).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::{Db, Policy};
use crate::error::{Error, ErrorKind, Result};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const PROMOTION_SQL: &str = include_str!("../../sql/schema/promotion.sql");

/// A table's promotion record as a grant passes it (`$7 $8 $9` of the grant statements).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Promotion {
    /// The server timeline the record names: a grant on any other is answered `stale`.
    pub(crate) timeline: i64,
    /// When a grant first saw that timeline; `None` when the record was made on it.
    pub(crate) seen_at: Option<SystemTime>,
    /// No lapsed or absent key or leadership is granted before it; `None`: nothing held off.
    pub(crate) grants_from: Option<SystemTime>,
    /// The longest TTL the record knows, in microseconds.
    longest_ttl: i64,
}

/// The statement that reads (and records) a table's promotion record
/// (`sql/schema/promotion.sql`), with the record table's name for errors.
#[derive(Debug)]
pub(crate) struct PromotionRecord {
    statement: Statement,
    table: String,
}

impl PromotionRecord {
    /// The record of `table` (`<table>_promotion`).
    pub(crate) fn new(table: &TableName) -> PromotionRecord {
        PromotionRecord {
            statement: Statement::new(render(PROMOTION_SQL, table)),
            table: table.derived("promotion"),
        }
    }
}

/// A grant's answer (a lease's acquire, a leader's poll) as the hold-off path reads it.
pub(crate) trait GrantAnswer {
    /// The server is on another timeline than the promotion record the grant was sent with.
    fn stale(&self) -> bool;
    /// The grant renewed or won: its caller holds now, whatever the record said.
    fn granted(&self) -> bool;
}

impl<A: GrantAnswer> GrantAnswer for (A, Instant) {
    fn stale(&self) -> bool {
        self.0.stale()
    }

    fn granted(&self) -> bool {
        self.0.granted()
    }
}

/// A grant statement's parameters (`sql/leases/acquire.sql`, `sql/elector/is_leader.sql`): $1 the
/// key or fleet name, $2 the owner or holder, $3 the TTL in microseconds, $4 the statement's own
/// (`T`), $5 whether tokens fold in the timeline, $6 whether grants are held off, $7 $8 $9 the
/// promotion record.
pub(crate) type GrantParams<'a, T> = (
    &'a str,
    &'a str,
    i64,
    T,
    bool,
    bool,
    i64,
    Option<SystemTime>,
    Option<SystemTime>,
);

impl Promotion {
    /// The parameters of a grant sent with this record on `db` (see [`GrantParams`]).
    pub(crate) fn grant_params<'a, T>(
        self,
        db: &Db,
        key: &'a str,
        owner: &'a str,
        ttl_us: i64,
        own: T,
    ) -> GrantParams<'a, T> {
        let (tokens, hold_off) = (db.timeline_tokens(), db.promotion_hold_off());
        let (timeline, seen_at, grants_from) = (self.timeline, self.seen_at, self.grants_from);
        (
            key,
            owner,
            ttl_us,
            own,
            tokens,
            hold_off,
            timeline,
            seen_at,
            grants_from,
        )
    }
}

/// The record statement's parameter: the longest TTL in microseconds (`sql/schema/promotion.sql`).
type Record = (i64,);

/// The records this `Db` has read, by table (the rendered name of the record).
#[derive(Debug, Default)]
pub(crate) struct Promotions(Mutex<HashMap<String, Promotion>>);

impl Db {
    /// The timeline of the promotion record this `Db` read through `record`, for renewals to say
    /// when the server is on another one; `None` when nothing is held off or nothing was read.
    pub(crate) fn promotion_timeline(&self, record: &PromotionRecord) -> Option<i64> {
        if !self.promotion_hold_off() || !self.timeline_tokens() {
            return None;
        }
        self.promotions
            .0
            .lock()
            .get(record.statement.name::<Record>())
            .map(|known| known.timeline)
    }

    /// Sends a grant (`send`, given the promotion record of the table whose record statement is
    /// `record`) through the hold-off after a promotion. An answer that the server is on another
    /// timeline than the record names (`stale`) reads the record again, recording the promotion if
    /// this is the first grant to see it; a refused grant is then sent once more (a second stale
    /// refusal stands: another grant is recording the promotion), and a granted one is kept
    /// ([`Db::refresh_promotion`]). So the first grant of any kind after a promotion starts the
    /// hold-off. A failed read of the record is the grant's failure.
    pub(crate) fn grant<A: GrantAnswer>(
        &self,
        record: &PromotionRecord,
        ttl_us: i64,
        mut send: impl FnMut(Promotion) -> Result<A>,
    ) -> Result<A> {
        let answer = send(self.promotion(record, ttl_us, false, None)?)?;
        if !answer.stale() {
            return Ok(answer);
        }
        if answer.granted() {
            self.refresh_promotion(record, ttl_us);
            return Ok(answer);
        }
        send(self.promotion(record, ttl_us, true, None)?)
    }

    /// Brings the record up to date after a renewal or grant answered `stale`, recording the
    /// promotion if first, so that the hold-off starts now rather than at the next grant. Waits
    /// for a pool connection a sixth of the TTL at most (half the time to a lease's next renewal);
    /// a failure is only logged: the next stale answer reads again.
    pub(crate) fn refresh_promotion(&self, record: &PromotionRecord, ttl_us: i64) {
        let within = Duration::from_micros(u64::try_from(ttl_us / 6).unwrap_or(0));
        if let Err(e) = self.promotion(record, ttl_us, true, Some(Instant::now() + within)) {
            log::debug!(target: "pgtenure::db", "reading the promotion record failed: {e}");
        }
    }

    /// The promotion record of the table whose record statement is `record`, as this `Db` last
    /// read it: read (one statement) the first time, when `reread` (a grant was answered that the
    /// server is on another timeline), and when `ttl_us` is longer than any TTL the record knows
    /// (which it raises first, so that the hold-off after a promotion covers this grant's
    /// holder). Without the hold-off ([`Db::with_promotion_hold_off`]) nothing is read. `until`
    /// bounds the wait for a pool connection (a renewal thread's read must not delay its next
    /// renewal).
    fn promotion(
        &self,
        record: &PromotionRecord,
        ttl_us: i64,
        reread: bool,
        until: Option<Instant>,
    ) -> Result<Promotion> {
        if !self.promotion_hold_off() || !self.timeline_tokens() {
            // Nothing held off: the grant statements then neither gate nor answer `stale`.
            return Ok(Promotion::default());
        }
        let name = record.statement.name::<Record>();
        if !reread {
            if let Some(known) = self.promotions.0.lock().get(name) {
                if ttl_us <= known.longest_ttl {
                    return Ok(*known);
                }
            }
        }
        let policy = match until {
            Some(until) => Policy::IDEMPOTENT.until(until),
            None => Policy::IDEMPOTENT,
        };
        let rows = self.query(
            "read promotion record",
            policy,
            &record.statement,
            &(ttl_us,),
        )?;
        let Some(row) = rows.first() else {
            return Err(Error::new(
                ErrorKind::Database,
                format!(
                    "read promotion record failed: the promotion record {} has no row; drop that \
                     record table and call create_table() or pgtenure::migrate() to make it again",
                    record.table
                ),
            ));
        };
        let columns = Read::new(row, "read promotion record", &record.table);
        let read = Promotion {
            timeline: columns.column("timeline")?,
            seen_at: columns.column("seen_at")?,
            grants_from: columns.column("grants_from")?,
            longest_ttl: columns.column("longest_ttl")?,
        };
        let mut known = self.promotions.0.lock();
        let before = known.insert(name.to_owned(), read);
        if read.seen_at.is_some() && before.is_none_or(|b| b.timeline != read.timeline) {
            log::info!(
                target: "pgtenure::db",
                "the server is on timeline {}, first seen by a grant at {:?}: lapsed keys and \
                 leaderships are granted again from {:?} (Db::with_promotion_hold_off)",
                read.timeline,
                read.seen_at,
                read.grants_from
            );
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    /// The server's timeline as every statement computes it (the first 8 hex digits of the WAL
    /// segment name).
    const TIMELINE: &str =
        "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint";

    const READERS: [(&str, &str); 8] = [
        ("promotion", include_str!("../../sql/schema/promotion.sql")),
        (
            "seed_promotion",
            include_str!("../../sql/schema/seed_promotion.sql"),
        ),
        (
            "tick claim",
            include_str!("../../sql/tick_claims/claim.sql"),
        ),
        ("unit claim", include_str!("../../sql/membership/claim.sql")),
        ("is_leader", include_str!("../../sql/elector/is_leader.sql")),
        (
            "force_release",
            include_str!("../../sql/leases/force_release.sql"),
        ),
        ("acquire", include_str!("../../sql/leases/acquire.sql")),
        (
            "renew_tenure",
            include_str!("../../sql/leases/renew_tenure.sql"),
        ),
    ];

    /// The grant statements' shared head: the timeline, the hold-off gate and the token base.
    fn grant_head(sql: &str) -> &str {
        let start = sql.find("WITH epoch AS (").expect("an epoch block");
        let end = sql.find("taken AS (").expect("a taken block");
        &sql[start..end]
    }

    #[test]
    fn every_statement_reads_the_timeline_alike() {
        for (name, sql) in READERS {
            assert!(
                sql.contains("pg_walfile_name") && sql.contains(TIMELINE),
                "{name} computes the server's timeline otherwise than {TIMELINE}"
            );
        }
    }

    #[test]
    fn both_grants_gate_and_draw_tokens_alike() {
        let acquire = grant_head(READERS[6].1);
        let is_leader = grant_head(READERS[4].1);
        assert!(acquire.contains("gate AS (") && acquire.contains("base AS ("));
        assert_eq!(
            acquire, is_leader,
            "sql/leases/acquire.sql and sql/elector/is_leader.sql must share their epoch, gate and \
             base blocks word for word"
        );
    }
}
