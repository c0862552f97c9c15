//! The lease statements, rendered once for a table, and one function per operation.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use postgres::Row;

use crate::db::{Connection, Db, Grant, GrantAnswer, Policy, Promotion, PromotionRecord};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::{statement_text, Fence};
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::{Failure, Statement};
use crate::table_name::{render, TableName};

const ACQUIRE: &str = include_str!("../../sql/leases/acquire.sql");
const RENEW: &str = include_str!("../../sql/leases/renew.sql");
const RENEW_TENURE: &str = include_str!("../../sql/leases/renew_tenure.sql");
const RELEASE: &str = include_str!("../../sql/leases/release.sql");
const RELEASE_AND_SWEEP: &str = include_str!("../../sql/leases/release_and_sweep.sql");
const SUPERSEDE: &str = include_str!("../../sql/leases/supersede.sql");
const FENCE: &str = include_str!("../../sql/leases/fence.sql");
const HOLDER: &str = include_str!("../../sql/leases/holder.sql");
const REFUSAL: &str = include_str!("../../sql/leases/refusal.sql");
const LIST: &str = include_str!("../../sql/leases/list.sql");
const SUMMARY: &str = include_str!("../../sql/leases/summary.sql");
const FORCE_RELEASE: &str = include_str!("../../sql/leases/force_release.sql");

/// The statements, rendered once for a table, each typed by its parameters.
pub(crate) struct Statements {
    pub(super) table: TableName,
    /// The check of the table's schema version before the first statement.
    gate: Gate,
    /// A grant whose own parameter is whether this owner's live lease is kept.
    acquire: Statement<Grant<'static, bool>>,
    /// keys, owner, TTL in microseconds.
    renew: Statement<(&'static [&'static str], &'static str, i64)>,
    renew_tenure: Statement<RenewTenure<'static>>,
    release: Statement<Release<'static>>,
    release_and_sweep: Statement<Release<'static>>,
    /// key.
    supersede: Statement<(&'static str,)>,
    /// key.
    holder: Statement<(&'static str,)>,
    /// key.
    refusal: Statement<(&'static str,)>,
    /// Reads (and records) the table's promotion record before grants.
    pub(super) promotion: PromotionRecord,
    /// key prefix.
    list: Statement<(&'static str,)>,
    /// how many of the soonest to lapse.
    summary: Statement<(i64,)>,
    /// key, whether tokens fold in the timeline.
    force_release: Statement<(&'static str, bool, Option<&'static str>)>,
    /// Sent unprepared: it runs inside the caller's transaction, where a missing prepared
    /// statement would abort it.
    fence: Arc<str>,
}

/// What an acquire's statement answered (`sql/leases/acquire.sql`).
#[derive(Debug, Default)]
pub(super) struct AcquireAnswer {
    /// `(token, superseded)` when granted.
    pub(super) granted: Option<(i64, bool)>,
    /// The server is on another timeline than the promotion record sent.
    pub(super) stale: bool,
}

impl GrantAnswer for AcquireAnswer {
    fn stale(&self) -> bool {
        self.stale
    }

    fn granted(&self) -> bool {
        self.granted.is_some()
    }
}

/// What a managed lease's renewal answered (`sql/leases/renew_tenure.sql`), when it was renewed.
#[derive(Debug)]
pub(super) struct Renewed {
    pub(super) superseded: bool,
    /// The server is on another timeline than the promotion record this `Db` read.
    pub(super) stale: bool,
}

impl Renewed {
    /// The managed renewal's row (`superseded`, `stale`).
    fn read(read: &Read<'_>) -> Result<Renewed> {
        Ok(Renewed {
            superseded: read.column("superseded")?,
            stale: read.column("stale")?,
        })
    }
}

crate::params! {
    /// A managed lease's renewal's parameters (`sql/leases/renew_tenure.sql`).
    pub(super) struct RenewTenure<'a> {
        pub(super) key: &'a str,
        pub(super) owner: &'a str,
        pub(super) token: i64,
        pub(super) ttl_us: i64,
        /// The timeline of the promotion record read ([`Db::promotion_timeline`]).
        pub(super) timeline: Option<i64>,
    }
}

crate::params! {
    /// A release's parameters (`sql/leases/release.sql`, `sql/leases/release_and_sweep.sql`).
    struct Release<'a> {
        key: &'a str,
        owner: &'a str,
        token: Option<i64>,
        /// The handover channel to notify, when notifications are on.
        channel: Option<&'a str>,
    }
}

impl Statements {
    /// Checks, once per `Db`, that the table is at the schema version these statements need (a
    /// grant reads the promotion record before its own statement).
    pub(super) fn check_schema(&self, db: &Db) -> Result<()> {
        self.gate.check(db)
    }

    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Statements::of_kind(Kind::Leases, table)
    }

    /// The statements on a table of another kind whose rows are lease rows by the columns these
    /// statements name (`key`, `owner`, `token`, `held_until`, `superseded`, `managed_token`): a
    /// semaphore's permits renew, fence and release with them ([`crate::semaphores`]).
    pub(crate) fn of_kind(kind: Kind, table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            gate: Gate::new(vec![(kind, table.clone())]),
            acquire: Statement::new(render(ACQUIRE, &table)),
            renew: Statement::new(render(RENEW, &table)),
            renew_tenure: Statement::new(render(RENEW_TENURE, &table)),
            release: Statement::new(render(RELEASE, &table)),
            release_and_sweep: Statement::new(render(RELEASE_AND_SWEEP, &table)),
            supersede: Statement::new(render(SUPERSEDE, &table)),
            holder: Statement::new(render(HOLDER, &table)),
            refusal: Statement::new(render(REFUSAL, &table)),
            promotion: PromotionRecord::new(&table),
            list: Statement::new(render(LIST, &table)),
            summary: Statement::new(render(SUMMARY, &table)),
            force_release: Statement::new(render(FORCE_RELEASE, &table)),
            fence: statement_text(&render(FENCE, &table)),
            table,
        })
    }

    /// Grants `key` to `owner` for `ttl_us` when free, expired, or held by this owner and `keep`;
    /// also returns the instant before the statement that answered was sent. An answer whose row
    /// cannot be read is an error although the grant may have been stored (it then lapses unused
    /// at its TTL).
    pub(super) fn acquire(
        &self,
        db: &Db,
        key: &str,
        owner: &str,
        ttl_us: i64,
        keep: bool,
        promotion: Promotion,
    ) -> Result<(AcquireAnswer, Instant)> {
        self.gate.check(db)?;
        let params = promotion.grant_params(db, key, owner, ttl_us, keep);
        let mut sent = Instant::now();
        let rows = db.with_conn("acquire lease", Policy::IDEMPOTENT, |conn| {
            sent = Instant::now();
            db.run(conn, &self.acquire, &params)
        })?;
        let mut answer = AcquireAnswer::default();
        for row in &rows {
            let read = Read::new(row, "acquire lease", &self.table);
            if read.column("stale")? {
                answer.stale = true;
            } else if answer.granted.is_none() {
                answer.granted = Some((read.column("token")?, read.column("superseded")?));
            }
        }
        Ok((answer, sent))
    }

    /// Renews `owner`'s live leases among `keys` for `ttl_us`: `(key, token, superseded)` of each
    /// renewed.
    pub(super) fn renew(
        &self,
        db: &Db,
        keys: &[&str],
        owner: &str,
        ttl_us: i64,
    ) -> Result<Vec<(String, i64, bool)>> {
        self.gate.check(db)?;
        let params = (keys, owner, ttl_us);
        let rows = db.query("renew leases", Policy::IDEMPOTENT, &self.renew, &params)?;
        rows.iter()
            .map(|row| {
                let read = Read::new(row, "renew leases", &self.table);
                Ok((
                    read.column("key")?,
                    read.column("token")?,
                    read.column("superseded")?,
                ))
            })
            .collect()
    }

    /// Prepares the managed renewal on `conn` without running it (before its cancel key is handed
    /// out).
    pub(super) fn prepare_renew_tenure(
        &self,
        db: &Db,
        conn: &mut Connection,
    ) -> std::result::Result<(), Failure> {
        db.prepare(conn, &self.renew_tenure)
    }

    /// Renews `owner`'s tenure `token` of `key` for `ttl_us` on `conn`; `None` when it is not live
    /// any more. The inner error: the answer's row could not be read (the renewal may have been
    /// stored).
    pub(super) fn renew_tenure(
        &self,
        db: &Db,
        conn: &mut Connection,
        params: &RenewTenure<'_>,
    ) -> std::result::Result<Result<Option<Renewed>>, Failure> {
        let rows = db.run(conn, &self.renew_tenure, params)?;
        let renewed = |row| Renewed::read(&Read::new(row, "renew lease", &self.table));
        Ok(rows.first().map(renewed).transpose())
    }

    /// The release statement, or once a minute (`sweep`) the one that also deletes long-lapsed
    /// rows.
    fn release_statement(&self, sweep: bool) -> &Statement<Release<'static>> {
        if sweep {
            &self.release_and_sweep
        } else {
            &self.release
        }
    }

    /// Prepares the release on `conn` without running it (before its cancel key is handed out).
    pub(super) fn prepare_release(
        &self,
        db: &Db,
        conn: &mut Connection,
        sweep: bool,
    ) -> std::result::Result<(), Failure> {
        db.prepare(conn, self.release_statement(sweep))
    }

    /// Releases `owner`'s live lease on `key` (and tenure `token`, when given) on `conn`: whether
    /// one was released. With `sweep`, also deletes rows that lapsed over an hour ago. The inner
    /// error: the answer's row could not be read (the release may have been stored).
    pub(super) fn release(
        &self,
        db: &Db,
        conn: &mut Connection,
        sweep: bool,
        key: &str,
        owner: &str,
        token: Option<i64>,
    ) -> std::result::Result<Result<bool>, Failure> {
        let channel = db.freed_channel(&self.table);
        let params = Release {
            key,
            owner,
            token,
            channel: channel.as_deref(),
        };
        let rows = db.run(conn, self.release_statement(sweep), &params)?;
        // A SELECT without FROM: always exactly one row.
        let Some(row) = rows.first() else {
            return Ok(Ok(false));
        };
        Ok(self.released(row))
    }

    /// Whether a release's row says it released; logs the rows it swept.
    fn released(&self, row: &Row) -> Result<bool> {
        let read = Read::new(row, "release lease", &self.table);
        let swept: i64 = read.column("swept")?;
        if swept > 0 {
            log::info!(target: "pgtenure::leases", "deleted {swept} lease rows that lapsed over an hour ago");
        }
        read.column("released")
    }

    /// Flags the live lease on `key` as superseded: whether there was one.
    pub(super) fn supersede(&self, db: &Db, key: &str) -> Result<bool> {
        self.gate.check(db)?;
        let row = db.query_one(
            "supersede lease",
            Policy::IDEMPOTENT,
            &self.supersede,
            &(key,),
        )?;
        Read::new(&row, "supersede lease", &self.table).at(0)
    }

    /// The row of `key`, live or lapsed.
    pub(super) fn holder(&self, db: &Db, key: &str) -> Result<Option<LeaseRow>> {
        self.gate.check(db)?;
        let rows = db.query(
            "read lease holder",
            Policy::IDEMPOTENT,
            &self.holder,
            &(key,),
        )?;
        rows.first()
            .map(|row| LeaseRow::read(row, "read lease holder", &self.table))
            .transpose()
    }

    /// Every row whose key starts with `prefix`, in key order.
    pub(super) fn list(&self, db: &Db, prefix: &str) -> Result<Vec<LeaseRow>> {
        self.gate.check(db)?;
        let rows = db.query("list leases", Policy::IDEMPOTENT, &self.list, &(prefix,))?;
        rows.iter()
            .map(|row| LeaseRow::read(row, "list leases", &self.table))
            .collect()
    }

    /// The counts and the `soonest` held leases closest to lapsing.
    pub(super) fn summary(&self, db: &Db, soonest: i64) -> Result<SummaryRow> {
        self.gate.check(db)?;
        let rows = db.query(
            "summarize leases",
            Policy::IDEMPOTENT,
            &self.summary,
            &(soonest,),
        )?;
        let first = rows.first().ok_or_else(|| {
            Error::new(
                ErrorKind::Database,
                "the lease summary answered no row (its aggregate always has one): an \
                     unexpected result; report it",
            )
        })?;
        let context = "summarize leases";
        let read = Read::new(first, context, &self.table);
        let mut soonest = Vec::new();
        for row in &rows {
            if Read::new(row, context, &self.table)
                .column::<Option<&str>>("key")?
                .is_some()
            {
                soonest.push(LeaseRow::read(row, context, &self.table)?);
            }
        }
        Ok(SummaryRow {
            rows: read.column("lease_rows")?,
            held: read.column("held")?,
            superseded: read.column("held_superseded")?,
            next_lapse: read.column("next_lapse")?,
            soonest,
        })
    }

    /// Ends the live tenure of `key`, whoever holds it: its owner when there was one.
    pub(super) fn force_release(&self, db: &Db, key: &str) -> Result<Option<String>> {
        self.gate.check(db)?;
        // The handover channel to notify, when notifications are on.
        let channel = db.freed_channel(&self.table);
        let params = (key, db.timeline_tokens(), channel.as_deref());
        let rows = db.query(
            "force release lease",
            Policy::ONCE,
            &self.force_release,
            &params,
        )?;
        rows.first()
            .map(|row| Read::new(row, "force release lease", &self.table).column("owner"))
            .transpose()
    }

    /// The row of `key` (`None` when it has none) and, when grants wait out a promotion, from
    /// when they resume.
    pub(super) fn refusal(
        &self,
        db: &Db,
        key: &str,
    ) -> Result<(Option<LeaseRow>, Option<SystemTime>)> {
        self.gate.check(db)?;
        let rows = db.query(
            "read lease refusal",
            Policy::IDEMPOTENT,
            &self.refusal,
            &(key,),
        )?;
        let Some(first) = rows.first() else {
            return Ok((None, None));
        };
        let context = "read lease refusal";
        let read = Read::new(first, context, &self.table);
        let row = match read.column::<Option<String>>("owner")? {
            Some(_) => Some(LeaseRow::read(first, context, &self.table)?),
            None => None,
        };
        Ok((row, read.column("grants_from")?))
    }

    /// The fence of `owner`'s tenure `token` of `key`: run inside a transaction, whether it is live
    /// (its row then locked `FOR SHARE` until the transaction ends).
    pub(super) fn fence(&self, key: &str, owner: &str, token: i64) -> Fence {
        Fence::new(
            "fence lease",
            self.fence.clone(),
            vec![key.into(), owner.into(), token.into()],
        )
    }
}

/// A lease row as the operator views read it (`holder.sql`, `list.sql`, `summary.sql`,
/// `refusal.sql`).
pub(super) struct LeaseRow {
    pub(super) key: String,
    pub(super) owner: String,
    pub(super) token: i64,
    pub(super) acquired_at: SystemTime,
    pub(super) held_until: SystemTime,
    pub(super) superseded: bool,
    pub(super) live: bool,
    pub(super) managed: bool,
}

impl LeaseRow {
    /// A lease row as the operator views read it, for the operation `context` on `table`.
    fn read(row: &Row, context: &str, table: &TableName) -> Result<LeaseRow> {
        let read = Read::new(row, context, table);
        Ok(LeaseRow {
            key: read.column("key")?,
            owner: read.column("owner")?,
            token: read.column("token")?,
            acquired_at: read.column("acquired_at")?,
            held_until: read.column("held_until")?,
            superseded: read.column("superseded")?,
            live: read.column("live")?,
            managed: read.column("managed")?,
        })
    }
}

/// What the summary statement answered (`sql/leases/summary.sql`): the counts, and the held leases
/// closest to lapsing.
pub(super) struct SummaryRow {
    pub(super) rows: i64,
    pub(super) held: i64,
    pub(super) superseded: i64,
    pub(super) next_lapse: Option<SystemTime>,
    pub(super) soonest: Vec<LeaseRow>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_built_with_its_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let sql = Statements::new(TableName::parse("ops.locks").unwrap());
        assert!(!sql.release_and_sweep.text().contains("{table"));
        assert!(!sql.force_release.text().contains("{table"));
    }

    #[test]
    fn the_sequence_is_named_after_the_table_in_its_schema() {
        let sql = Statements::new(TableName::parse("ops.locks").unwrap());
        assert!(sql
            .acquire
            .text()
            .contains("nextval('\"ops\".\"locks_token_seq\"')"));
    }
}
