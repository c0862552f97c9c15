//! A won tick ([`TickClaim`]): its deadline, extension, fenced writes and release.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::TickClaims;
use crate::error::Result;
use crate::fence::Fence;
use crate::input::{micros, MIN_DURATION};

/// A won tick: this instance runs it.
///
/// Dropping it does nothing: the job stays busy until `busy_for` lapses, so a claim dropped by
/// mistake cannot let a second run start early. Call [`TickClaim::release`] when the run is done.
#[must_use = "a won tick should be run, then released"]
pub struct TickClaim {
    pub(super) claims: TickClaims,
    pub(super) job_id: String,
    pub(super) tick: SystemTime,
    pub(super) token: i64,
    pub(super) deadline: Mutex<Instant>,
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
    /// so no later tick can be claimed before it commits (as [`Lease::fence`](crate::leases::Lease::fence)
    /// does for a lease). Make a write that only this run may make only when it returns `true`: a
    /// run that outlived its busy period, or was released, is refused.
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        self.fence_statement().check(tx)
    }

    /// This claim's fence as a value: the statement and its parameters (job id, owner, token), for
    /// any driver to run inside its own transaction ([`crate::fence`]). [`TickClaim::fence`] runs
    /// it.
    pub fn fence_statement(&self) -> Fence {
        let claims = &self.claims;
        claims.sql.fence(&self.job_id, &claims.owner, self.token)
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
