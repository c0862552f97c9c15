//! Tick claims: each tick of a recurring job runs on exactly one instance.
//!
//! Every instance of an application computes the same schedule ("every minute, on the minute") and,
//! at each tick, calls [`TickClaims::claim`] with the job's id and the tick's time. (A tick here is a
//! scheduled instant of a job; [`Leaser::tick`](crate::membership::Leaser::tick) is something else, a
//! rebalance step of membership.) One row per job keeps the last tick claimed and a busy deadline, so
//! the table never grows with time:
//!
//! - a tick is granted to exactly one caller;
//! - a tick older than or equal to the last one claimed is refused, so an instance that asks late
//!   (paused, clock behind) cannot run a tick again;
//! - while a claim is busy (from the claim until [`TickClaim::release`] or until `busy_for` has
//!   lapsed by the database clock) later ticks are refused too, so runs never overlap;
//! - a tick more than a minute ahead of the database clock is refused with
//!   [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) and stored nowhere, so one instance
//!   with a clock far ahead cannot lock the job out for the others.
//!
//! Ticks are data the caller supplies; whether a claim is busy is decided by PostgreSQL's `now()`, so
//! instances whose clocks disagree still agree. Ticks are compared at microsecond precision.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use pgtenure::{Db, TickClaims};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let claims = TickClaims::new(&db);
//! claims.create_table()?;
//!
//! // The start of the current minute, the same on every instance.
//! let secs = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
//! let tick = UNIX_EPOCH + Duration::from_secs(secs - secs % 60);
//! if let Some(claim) = claims.claim("nightly-report", tick, Duration::from_secs(300))? {
//!     // This instance, and no other, runs this tick.
//!     claim.release()?; // done early: the next tick may be claimed at once
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use self::sql::{ClaimAnswer, Statements};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::input::{check_key, check_tick, micros, MIN_DURATION};
use crate::instance::{default_owner, random_u64};
use crate::table_name::TableName;
use crate::timestamp::Timestamp;

mod sql;

/// The table [`TickClaims::new`] uses unless [`TickClaims::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_tick_claims";

/// Claims ticks of recurring jobs; see the [module docs](self).
///
/// Cheap to clone, `Send` and `Sync`.
#[derive(Clone)]
pub struct TickClaims {
    db: Db,
    owner: Arc<str>,
    sql: Arc<Statements>,
}

impl TickClaims {
    /// Tick claims in the table `pgtenure_tick_claims`, owned by a fresh owner name
    /// (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> TickClaims {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        TickClaims {
            db: db.clone(),
            owner: default_owner().into(),
            sql: Statements::new(table),
        }
    }

    /// Uses another table: `table` or `schema.table`, each part a plain identifier of at most 63
    /// bytes. Defaults to `pgtenure_tick_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(mut self, table: &str) -> Result<TickClaims> {
        self.sql = Statements::new(TableName::parse(table)?);
        Ok(self)
    }

    /// Names the owner written into claimed rows (for operators reading the table). Defaults to
    /// `"{hostname}-{pid}-{random hex}"`, distinct for every `TickClaims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `owner` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_owner(mut self, owner: &str) -> Result<TickClaims> {
        check_key("owner", owner)?;
        self.owner = owner.into();
        Ok(self)
    }

    /// The owner written into claimed rows.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Creates the table unless it exists. Every instance may call it at startup, all at once.
    ///
    /// # Errors
    ///
    /// A database or connection error; creating needs `CREATE` on the schema, which must exist.
    pub fn create_table(&self) -> Result<()> {
        let ddl = [self.sql.create_table.clone()];
        self.db
            .create_table("create tick claims table", &self.sql.table, &ddl, &[])
    }

    /// Claims `tick` of `job_id`, keeping the job busy for `busy_for` unless released earlier.
    ///
    /// Returns `Some` when this caller won the tick and must run it, `None` when the tick was already
    /// claimed, is not newer than the last claimed tick, or the job is busy. One statement, one round
    /// trip; a refused claim writes nothing.
    ///
    /// Each call carries a random claim id, stored with a win. When the connection fails after the
    /// claim was sent (the server may have committed it and only the answer was lost), the claim is
    /// sent once more on another connection: it finds its own win by the id and returns it, or
    /// claims now. So a won tick is never reported as refused (it would then run nowhere).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), with nothing stored, when
    /// `job_id` is blank, contains a NUL byte or is over 1,024 bytes, when `busy_for` is under 1 ms
    /// or over 100 years, when `tick` is before 1970 or after 9999, or when `tick` is more than one
    /// minute ahead of the database clock. Otherwise a database or connection error.
    pub fn claim(
        &self,
        job_id: &str,
        tick: SystemTime,
        busy_for: Duration,
    ) -> Result<Option<TickClaim>> {
        match self.claim_reporting(job_id, tick, busy_for, RAW_LEAD)? {
            (Claimed::Won(claim), _) => Ok(Some(claim)),
            (Claimed::Refused, _) => Ok(None),
            (Claimed::NotYetDue, db_now) => {
                let ahead = tick.duration_since(db_now).unwrap_or_default();
                Err(Error::invalid_input(format!(
                    "tick of job {job_id:?} is {ahead:.1?} ahead of the database clock; ticks more \
                     than one minute ahead are refused (check this host's clock)"
                )))
            }
        }
    }

    /// Every job in this table, in job id order: its last claimed tick, who claimed it with which
    /// token, and whether that run is busy now by the database clock. One statement that reads the
    /// whole table (one row per job): an operator's view, not something to poll in a loop.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn jobs(&self) -> Result<Vec<JobInfo>> {
        self.sql.jobs(&self.db)
    }

    /// The database clock, in one round trip (a scheduler's first estimate of its host's offset).
    pub(crate) fn db_now(&self) -> Result<SystemTime> {
        self.sql.now(&self.db)
    }

    /// Claims `tick` if it is at most `lead` ahead of the database clock (a minute for
    /// [`TickClaims::claim`], none for a scheduler), also returning the database clock as the claim
    /// statement read it.
    pub(crate) fn claim_reporting(
        &self,
        job_id: &str,
        tick: SystemTime,
        busy_for: Duration,
        lead: Duration,
    ) -> Result<(Claimed, SystemTime)> {
        check_key("job id", job_id)?;
        check_tick(tick)?;
        let busy_us = micros("busy_for", busy_for, MIN_DURATION)?;
        let lead_us = i64::try_from(lead.as_micros()).unwrap_or(i64::MAX);
        let claim_id = random_u64() as i64;
        let (answer, started) = self.sql.claim(
            &self.db,
            job_id,
            tick,
            busy_us,
            &self.owner,
            claim_id,
            lead_us,
        )?;
        let (token, db_now) = match answer {
            ClaimAnswer::TooFar { db_now } => return Ok((Claimed::NotYetDue, db_now)),
            ClaimAnswer::Claimed { token, db_now } => (token, db_now),
        };
        log::debug!(
            target: "pgtenure::tick_claims",
            "claim of job {job_id:?} at {tick:?}: {}",
            if token.is_some() { "won" } else { "refused" }
        );
        let claimed = match token {
            Some(token) => Claimed::Won(TickClaim {
                claims: self.clone(),
                job_id: job_id.to_owned(),
                tick,
                token,
                deadline: Mutex::new(started + busy_for),
            }),
            None => Claimed::Refused,
        };
        Ok((claimed, db_now))
    }
}

/// How far ahead of the database clock [`TickClaims::claim`] accepts a tick.
const RAW_LEAD: Duration = Duration::from_secs(60);

/// What a claim came to.
#[derive(Debug)]
pub(crate) enum Claimed {
    /// Won: run it.
    Won(TickClaim),
    /// Refused: claimed already, not newer than the last claimed tick, or the job is busy.
    Refused,
    /// The tick is further ahead of the database clock than allowed; nothing was stored.
    NotYetDue,
}

impl fmt::Debug for TickClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TickClaims")
            .field("table", &self.sql.table)
            .field("owner", &self.owner)
            .finish()
    }
}

/// One job's row ([`TickClaims::jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's id.
    pub job_id: String,
    /// The last tick claimed.
    pub tick: SystemTime,
    /// Who claimed it ([`TickClaims::with_owner`]).
    pub owner: String,
    /// Its claim counter ([`TickClaim::token`]).
    pub token: i64,
    /// Until when that run keeps the job busy (database time); `None` once released.
    pub busy_until: Option<SystemTime>,
    /// Whether the job is busy now by the database clock (later ticks are refused until then).
    pub busy: bool,
}

/// `job "report": tick 2026-12-03T06:00:00.000Z claimed by worker-1 (token 12), busy until
/// 2026-12-03T06:01:00.000Z`, or `…, idle` once its run is over.
impl fmt::Display for JobInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {:?}: tick {} claimed by {} (token {}), ",
            self.job_id,
            Timestamp(self.tick),
            self.owner,
            self.token
        )?;
        match self.busy_until {
            Some(until) if self.busy => write!(f, "busy until {}", Timestamp(until)),
            _ => f.write_str("idle"),
        }
    }
}

/// A won tick: this instance runs it.
///
/// Dropping it does nothing: the job stays busy until `busy_for` lapses, so a claim dropped by
/// mistake cannot let a second run start early. Call [`TickClaim::release`] when the run is done.
#[must_use = "a won tick should be run, then released"]
pub struct TickClaim {
    claims: TickClaims,
    job_id: String,
    tick: SystemTime,
    token: i64,
    deadline: Mutex<Instant>,
}

impl TickClaim {
    /// The job's id.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The tick that was won.
    pub fn tick(&self) -> SystemTime {
        self.tick
    }

    /// The job's claim counter, one higher for every tick won: a fencing token for the run's writes.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// When the busy period ends at the latest, by this process's clock. It was taken before the
    /// claim (or the last [`TickClaim::extend`]) was sent, so it never falls after the database's
    /// own deadline: a run that stops by then never overlaps the next tick's run.
    pub fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    /// Keeps the job busy for at least `busy_for` from now, while this claim is still the job's
    /// latest and busy (owner and token guard it), and moves [`TickClaim::deadline`] accordingly.
    /// Returns `false`, writing nothing, when the busy period has lapsed or the claim was
    /// released: the run must then stop by its deadline. One statement; call it every third of
    /// the busy period or so while a long run goes on (a scheduler's runs do this on their own).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `busy_for` is under 1 ms or
    /// over 100 years; otherwise a database or connection error (the deadline is then unchanged).
    pub fn extend(&self, busy_for: Duration) -> Result<bool> {
        let busy_us = micros("busy_for", busy_for, MIN_DURATION)?;
        let claims = &self.claims;
        let Some(started) =
            claims
                .sql
                .extend(&claims.db, &self.job_id, &claims.owner, self.token, busy_us)?
        else {
            return Ok(false);
        };
        let until = started + busy_for;
        let mut deadline = self.deadline.lock();
        *deadline = (*deadline).max(until);
        Ok(true)
    }

    /// Checks, inside the caller's transaction, that this run is still the job's latest claim and
    /// busy by `clock_timestamp()`, and locks the job's row `FOR SHARE` until the transaction ends,
    /// so no later tick can be claimed before it commits (as [`Leases::fence`](crate::Leases::fence)
    /// does for a lease). Make a write that only this run may make only when it returns `true`: a
    /// run that outlived its busy period, or was released, is refused.
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        let claims = &self.claims;
        claims
            .sql
            .fence(tx, &self.job_id, &claims.owner, self.token)
    }

    /// Ends the busy period now, so that the next tick can be claimed without waiting for `busy_for`
    /// to lapse. Guarded by owner and token: it never frees a later claim. Releasing a claim whose
    /// busy period has already lapsed does nothing.
    ///
    /// # Errors
    ///
    /// A database or connection error; the busy period then lapses on its own.
    pub fn release(self) -> Result<()> {
        let claims = &self.claims;
        let released = claims
            .sql
            .release(&claims.db, &self.job_id, &claims.owner, self.token)?;
        if !released {
            log::debug!(
                target: "pgtenure::tick_claims",
                "release of job {:?} token {}: busy period had already ended",
                self.job_id,
                self.token
            );
        }
        Ok(())
    }
}

impl fmt::Debug for TickClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TickClaim")
            .field("job_id", &self.job_id)
            .field("tick", &self.tick)
            .field("token", &self.token)
            .field("deadline", &self.deadline())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_prints_as_a_log_line_with_rfc_3339_times() {
        let mut job = JobInfo {
            job_id: "report".into(),
            tick: SystemTime::UNIX_EPOCH,
            owner: "worker-1".into(),
            token: 12,
            busy_until: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(60)),
            busy: true,
        };
        assert_eq!(
            job.to_string(),
            "job \"report\": tick 1970-01-01T00:00:00.000Z claimed by worker-1 (token 12), busy \
             until 1970-01-01T00:01:00.000Z"
        );
        job.busy = false;
        assert!(job.to_string().ends_with("(token 12), idle"));
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<TickClaims>();
        check::<TickClaim>();
    }
}
