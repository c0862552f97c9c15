//! The tick-claim statements, rendered once for a table, and one function per operation.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::db::{one_row, Db, Policy};
use crate::error::Result;
use crate::fence::{statement_text, Fence};
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const CLAIM: &str = include_str!("../../sql/tick_claims/claim.sql");
const RELEASE: &str = include_str!("../../sql/tick_claims/release.sql");
const EXTEND: &str = include_str!("../../sql/tick_claims/extend.sql");
const FENCE: &str = include_str!("../../sql/tick_claims/fence.sql");
const NOW: &str = include_str!("../../sql/tick_claims/now.sql");
const JOBS: &str = include_str!("../../sql/tick_claims/jobs.sql");

/// The statements, rendered once for a table, each typed by its parameters.
pub(super) struct Statements {
    pub(super) table: TableName,
    /// The check of the table's schema version before the first statement.
    gate: Gate,
    claim: Statement<Claim<'static>>,
    /// job id, owner, token.
    release: Statement<(&'static str, &'static str, i64)>,
    extend: Statement<Extend<'static>>,
    now: Statement<()>,
    jobs: Statement<()>,
    /// Sent unprepared: it runs inside the caller's transaction, where a missing prepared
    /// statement would abort it.
    fence: Arc<str>,
}

crate::params! {
    /// A claim's parameters (`sql/tick_claims/claim.sql`).
    pub(super) struct Claim<'a> {
        pub(super) job_id: &'a str,
        pub(super) tick: SystemTime,
        /// How long the claim keeps the job busy, in microseconds.
        pub(super) busy_us: i64,
        pub(super) owner: &'a str,
        /// Finds its own win when the claim is sent again.
        pub(super) claim_id: i64,
        /// Whether the token folds in the server's timeline ([`Db::timeline_tokens`]).
        pub(super) timeline_tokens: bool,
        /// How far ahead of the database clock the tick may be, in microseconds.
        pub(super) lead_us: i64,
    }
}

crate::params! {
    /// An extension's parameters (`sql/tick_claims/extend.sql`).
    struct Extend<'a> {
        job_id: &'a str,
        owner: &'a str,
        token: i64,
        busy_us: i64,
    }
}

/// What the claim statement answered.
pub(super) enum ClaimAnswer {
    /// The tick is further ahead of the database clock than allowed: nothing stored.
    TooFar { db_now: SystemTime },
    /// `token` when won, `None` when refused.
    Claimed {
        token: Option<i64>,
        db_now: SystemTime,
    },
}

impl ClaimAnswer {
    /// The claim statement's row (`too_far`, `token`, `db_now`).
    fn read(read: &Read<'_>) -> Result<ClaimAnswer> {
        let db_now = read.column("db_now")?;
        Ok(if read.column("too_far")? {
            ClaimAnswer::TooFar { db_now }
        } else {
            ClaimAnswer::Claimed {
                token: read.column("token")?,
                db_now,
            }
        })
    }
}

/// One job's row as the jobs statement reads it (`sql/tick_claims/jobs.sql`).
pub(super) struct JobRow {
    pub(super) job_id: String,
    pub(super) tick: SystemTime,
    pub(super) owner: String,
    pub(super) token: i64,
    pub(super) busy_until: Option<SystemTime>,
    pub(super) busy: bool,
}

impl JobRow {
    /// The jobs statement's row (`job_id`, `tick`, `owner`, `token`, `busy_until`, `busy`).
    fn read(read: &Read<'_>) -> Result<JobRow> {
        Ok(JobRow {
            job_id: read.column("job_id")?,
            tick: read.column("tick")?,
            owner: read.column("owner")?,
            token: read.column("token")?,
            busy_until: read.column("busy_until")?,
            busy: read.column("busy")?,
        })
    }
}

impl Statements {
    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            gate: Gate::new(vec![(Kind::TickClaims, table.clone())]),
            claim: Statement::new(render(CLAIM, &table)),
            release: Statement::new(render(RELEASE, &table)),
            extend: Statement::new(render(EXTEND, &table)),
            fence: statement_text(&render(FENCE, &table)),
            now: Statement::new(NOW.to_owned()),
            jobs: Statement::new(render(JOBS, &table)),
            table,
        })
    }

    /// Claims `tick` of `job_id` for `owner`, busy for `busy_us`, unless it is more than `lead_us`
    /// ahead of the database clock; also returns the instant of the first send (the busy period
    /// starts no earlier). `claim_id` finds its own win when the claim is sent again. An answer
    /// whose row cannot be read is an error although the tick may have been claimed.
    pub(super) fn claim(&self, db: &Db, params: &Claim<'_>) -> Result<(ClaimAnswer, Instant)> {
        self.gate.check(db)?;
        let mut started = None;
        let rows = db.with_conn("claim tick", Policy::IDEMPOTENT, |conn| {
            started.get_or_insert_with(Instant::now);
            db.run(conn, &self.claim, params)
        })?;
        let row = one_row("claim tick", rows)?;
        let started = started.unwrap_or_else(Instant::now);
        let answer = ClaimAnswer::read(&Read::new(&row, "claim tick", &self.table))?;
        Ok((answer, started))
    }

    /// Keeps the claim `token` busy for at least `busy_us` from now: the instant of the first send
    /// when it is still the job's latest and busy, `None` (nothing written) otherwise.
    pub(super) fn extend(
        &self,
        db: &Db,
        job_id: &str,
        owner: &str,
        token: i64,
        busy_us: i64,
    ) -> Result<Option<Instant>> {
        self.gate.check(db)?;
        let params = Extend {
            job_id,
            owner,
            token,
            busy_us,
        };
        let mut started = None;
        let rows = db.with_conn("extend tick claim", Policy::IDEMPOTENT, |conn| {
            started.get_or_insert_with(Instant::now);
            db.run(conn, &self.extend, &params)
        })?;
        Ok((!rows.is_empty()).then(|| started.unwrap_or_else(Instant::now)))
    }

    /// The fence of the claim `token`: run inside a transaction, whether it is still the job's
    /// latest and busy (its row then locked `FOR SHARE` until the transaction ends).
    pub(super) fn fence(&self, job_id: &str, owner: &str, token: i64) -> Fence {
        Fence::new(
            "fence tick claim",
            self.fence.clone(),
            vec![job_id.into(), owner.into(), token.into()],
        )
    }

    /// Ends the claim `token`'s busy period: whether it was still busy.
    pub(super) fn release(&self, db: &Db, job_id: &str, owner: &str, token: i64) -> Result<bool> {
        self.gate.check(db)?;
        let params = (job_id, owner, token);
        let rows = db.query(
            "release tick claim",
            Policy::IDEMPOTENT,
            &self.release,
            &params,
        )?;
        Ok(!rows.is_empty())
    }

    /// The database clock.
    pub(super) fn now(&self, db: &Db) -> Result<SystemTime> {
        let row = db.query_one(
            "read the database clock",
            Policy::IDEMPOTENT,
            &self.now,
            &(),
        )?;
        Read::server(&row, "read the database clock", &"now()").column("db_now")
    }

    /// Every job's row, in job id order.
    pub(super) fn jobs(&self, db: &Db) -> Result<Vec<JobRow>> {
        self.gate.check(db)?;
        let rows = db.query("read jobs", Policy::IDEMPOTENT, &self.jobs, &())?;
        rows.iter()
            .map(|row| JobRow::read(&Read::new(row, "read jobs", &self.table)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_built_with_its_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let sql = Statements::new(TableName::parse("ops.ticks").unwrap());
        assert!(sql.jobs.text().contains("\"ops\".\"ticks\""));
    }

    #[test]
    fn statements_are_rendered_for_the_table() {
        let sql = Statements::new(TableName::parse("ops.ticks").unwrap());
        assert!(sql.claim.text().contains("UPDATE \"ops\".\"ticks\" AS c"));
        assert!(!sql.claim.text().contains("{table"));
    }
}
