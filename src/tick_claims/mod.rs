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
//! A run's writes fence themselves with [`TickClaim::fence`] inside their transaction (another driver
//! runs the same fence as a value, [`TickClaim::fence_statement`]: [`crate::fence`]).
//!
//! Ticks are data the caller supplies; whether a claim is busy is decided by PostgreSQL's `now()`, so
//! instances whose clocks disagree still agree. Ticks are compared at microsecond precision.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use pgtenure::{Db, tick_claims::TickClaims};
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
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

use self::sql::{ClaimAnswer, Statements};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::input::{check_key, check_tick, micros, MIN_DURATION};
use crate::instance::{default_owner, random_u64};
use crate::migrations::Kind;
use crate::observe;
use crate::table_name::TableName;

mod claim;
mod sql;
mod views;

pub use self::claim::TickClaim;
pub use self::views::JobInfo;

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

    /// Creates the table, or brings it to this version's schema (see [`crate::migrations`]); a
    /// table at this version is left as it is. Every instance may call it at startup, all at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Schema`](crate::ErrorKind::Schema) when the table was migrated by a newer
    /// pgtenure (nothing is changed; this one's handles still use it) or is recorded as another
    /// kind of pgtenure table; a database or connection error: creating and migrating need
    /// `CREATE` on the schema, which must exist, and ownership of the table.
    pub fn create_table(&self) -> Result<()> {
        self.db
            .migrate_table(Kind::TickClaims, &self.sql.table)
            .map(drop)
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
    /// minute ahead of the database clock. Otherwise a database or connection error; an answer that
    /// cannot be read (a column of the table changed: see
    /// [`ErrorKind::Database`](crate::ErrorKind::Database)) is an error although the tick may have
    /// been claimed.
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
        let params = sql::Claim {
            job_id,
            tick,
            busy_us,
            owner: &self.owner,
            claim_id,
            timeline_tokens: self.db.timeline_tokens(),
            lead_us,
        };
        let (answer, started) = self.sql.claim(&self.db, &params)?;
        let (token, db_now) = match answer {
            ClaimAnswer::TooFar { db_now } => {
                observe::tick_claim("not_yet_due");
                return Ok((Claimed::NotYetDue, db_now));
            }
            ClaimAnswer::Claimed { token, db_now } => (token, db_now),
        };
        observe::tick_claim(if token.is_some() { "won" } else { "refused" });
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
