//! The promotion record beside each lease and leader table (`sql/schema/create_promotion.sql`):
//! read once per [`Db`] and table, and passed to every grant as parameters, so that a grant's
//! statement never reads another table (see [`Db::with_promotion_hold_off`]); and the probe of the
//! server's timeline ([`Db::with_timeline_tokens`]).

use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime};

use postgres::error::SqlState;

use super::outcome::Policy;
use super::records::Promotion;
use super::Db;
use crate::error::{Error, ErrorKind, Result};
use crate::row::Read;
use crate::statement::{Param, Params, Statement, Value};
use crate::table_name::{render, TableName};

const PROMOTION_SQL: &str = include_str!("../../sql/schema/promotion.sql");

/// Whether the server folds its timeline into tokens: `Some(true)` when a primary answers the WAL
/// functions, `Some(false)` when it refuses them, `None` when this connection cannot tell (a
/// standby, a failure).
const TIMELINE_PROBE: &str = include_str!("../../sql/schema/timeline.sql");

/// The statement that reads (and records) a table's promotion record
/// (`sql/schema/promotion.sql`), with the record table's name for errors.
#[derive(Debug)]
pub(crate) struct PromotionRecord {
    statement: Statement<Record>,
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

/// A grant statement's parameters (`sql/leases/acquire.sql`, `sql/elector/is_leader.sql`), in
/// bind order: the grant's own fourth parameter is `T` (an acquire's `keep`, a poll's `term`).
#[derive(Debug)]
pub(crate) struct Grant<'a, T> {
    /// `$1`: the key or fleet name.
    key: &'a str,
    /// `$2`: the owner or holder.
    owner: &'a str,
    /// `$3`: the TTL in microseconds.
    ttl_us: i64,
    /// `$4`: the statement's own.
    own: T,
    /// `$5`: whether tokens fold in the timeline.
    timeline_tokens: bool,
    /// `$6`: whether grants are held off.
    hold_off: bool,
    /// `$7 $8 $9`: the promotion record.
    timeline: i64,
    seen_at: Option<SystemTime>,
    grants_from: Option<SystemTime>,
}

impl<T: Param> Params for Grant<'_, T> {
    const TYPES: &'static [postgres::types::Type] = &[
        <&str>::TYPE,
        <&str>::TYPE,
        i64::TYPE,
        T::TYPE,
        bool::TYPE,
        bool::TYPE,
        i64::TYPE,
        <Option<SystemTime>>::TYPE,
        <Option<SystemTime>>::TYPE,
    ];
    type Static = Grant<'static, T::Static>;

    fn with_values<R>(&self, f: impl FnOnce(&[Value<'_>]) -> R) -> R {
        f(&self.values())
    }
}

impl<T: Param> Grant<'_, T> {
    /// `$1`..`$9`, in bind order.
    fn values(&self) -> [Value<'_>; 9] {
        [
            &self.key,
            &self.owner,
            &self.ttl_us,
            &self.own,
            &self.timeline_tokens,
            &self.hold_off,
            &self.timeline,
            &self.seen_at,
            &self.grants_from,
        ]
    }
}

/// A leadership poll's parameters (`sql/elector/is_leader.sql`): a grant's, then `$10`: how much
/// longer than its last holder another member waits for a lapsed leadership after a promotion's
/// hold-off (the poller's retry period, at most its TTL, in microseconds), and `$11`: the newest
/// term the poller won, its tenure ended or not (a last holder the promoted standby may never have
/// seen).
#[derive(Debug)]
pub(crate) struct Preferring<'a, T> {
    pub(crate) grant: Grant<'a, T>,
    pub(crate) prefer_us: i64,
    pub(crate) last_term: Option<i64>,
}

impl<T: Param> Params for Preferring<'_, T> {
    const TYPES: &'static [postgres::types::Type] = &[
        <&str>::TYPE,
        <&str>::TYPE,
        i64::TYPE,
        T::TYPE,
        bool::TYPE,
        bool::TYPE,
        i64::TYPE,
        <Option<SystemTime>>::TYPE,
        <Option<SystemTime>>::TYPE,
        i64::TYPE,
        <Option<i64>>::TYPE,
    ];
    type Static = Preferring<'static, T::Static>;

    fn with_values<R>(&self, f: impl FnOnce(&[Value<'_>]) -> R) -> R {
        let [key, owner, ttl, own, fold, hold_off, timeline, seen_at, from] = self.grant.values();
        f(&[
            key,
            owner,
            ttl,
            own,
            fold,
            hold_off,
            timeline,
            seen_at,
            from,
            &self.prefer_us,
            &self.last_term,
        ])
    }
}

impl Promotion {
    /// The parameters of a grant sent with this record on `db` (see [`Grant`]).
    pub(crate) fn grant_params<'a, T>(
        self,
        db: &Db,
        key: &'a str,
        owner: &'a str,
        ttl_us: i64,
        own: T,
    ) -> Grant<'a, T> {
        Grant {
            key,
            owner,
            ttl_us,
            own,
            timeline_tokens: db.timeline_tokens(),
            hold_off: db.promotion_hold_off(),
            timeline: self.timeline,
            seen_at: self.seen_at,
            grants_from: self.grants_from,
        }
    }
}

/// The record statement's parameter: the longest TTL in microseconds (`sql/schema/promotion.sql`).
type Record = (i64,);

impl Db {
    /// What the server tells of its timeline: `Some(true)` when a primary answers the WAL
    /// functions, `Some(false)` when it refuses them, `None` when it cannot tell (a standby, a
    /// failure). See [`Db::with_timeline_tokens`].
    ///
    /// Sent on a pool connection like every other statement, so the connection's statement mode
    /// governs it (nothing prepared under a driver-chosen name on a connection not proven direct)
    /// and [`Db::statement_modes`] counts it.
    pub(crate) fn probe_timeline(&self) -> Option<bool> {
        static PROBE: LazyLock<Statement<()>> =
            LazyLock::new(|| Statement::new(TIMELINE_PROBE.to_owned()));
        match self.query_one("probe the timeline", Policy::IDEMPOTENT, &PROBE, &()) {
            Ok(row) => match Read::server(&row, "probe the timeline", &"the timeline probe")
                .column::<Option<String>>("walfile")
            {
                Ok(wal) => wal.map(|_| true),
                Err(e) => {
                    log::debug!(target: "pgtenure::db", "{e}; fencing tokens fold in the timeline");
                    None
                }
            },
            // Only a refusal of the functions themselves says so: any other error (a pooler's
            // own, a busy server) tells nothing, and tokens stay folded.
            Err(e)
                if e.code().is_some_and(|code| {
                    [
                        SqlState::INSUFFICIENT_PRIVILEGE,
                        SqlState::FEATURE_NOT_SUPPORTED,
                        SqlState::UNDEFINED_FUNCTION,
                    ]
                    .contains(code)
                }) =>
            {
                log::info!(target: "pgtenure::db", "the server refuses WAL functions ({e}): fencing tokens do not fold in its timeline (Db::with_timeline_tokens)");
                Some(false)
            }
            Err(e) => {
                log::debug!(target: "pgtenure::db", "the timeline probe failed ({e}); fencing tokens fold in the timeline");
                None
            }
        }
    }

    /// The timeline of the promotion record this `Db` read through `record`, for renewals to say
    /// when the server is on another one; `None` when nothing is held off or nothing was read.
    pub(crate) fn promotion_timeline(&self, record: &PromotionRecord) -> Option<i64> {
        if !self.promotion_hold_off() || !self.timeline_tokens() {
            return None;
        }
        self.promotions
            .0
            .lock()
            .get(&record.statement.key())
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
        let key = record.statement.key();
        if !reread {
            if let Some(known) = self.promotions.0.lock().get(&key) {
                if ttl_us <= known.longest_ttl_us {
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
            longest_ttl_us: columns.column("longest_ttl")?,
        };
        let mut known = self.promotions.0.lock();
        let before = known.insert(key, read);
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
    #[test]
    fn the_statements_are_built_with_their_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let _ = super::Statement::<()>::new(super::TIMELINE_PROBE.to_owned());
        let table = crate::table_name::TableName::parse("ops.locks").unwrap();
        assert!(super::PromotionRecord::new(&table)
            .table
            .contains("promotion"));
    }

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

    /// The grant statements' shared head: the timeline, the hold-off gate and the token base (up to
    /// the first block of the statement's own: is_leader.sql's `opens`, else `taken`).
    fn grant_head(sql: &str) -> &str {
        let start = sql.find("WITH epoch AS (").expect("an epoch block");
        let end = (sql.find("opens AS ("))
            .or_else(|| sql.find("taken AS ("))
            .expect("a taken block");
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
