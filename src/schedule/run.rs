//! The run a won tick gets (how a won tick is run is in `won_tick.rs`).

use std::fmt;
use std::time::{Instant, SystemTime};

use crate::error::Result;
use crate::fence::Fence;
use crate::tick_claims::TickClaim;

/// A won tick being run: what the job's function gets.
pub struct Run {
    claim: TickClaim,
}

impl Run {
    /// The run of the won tick `claim`.
    pub(super) fn new(claim: TickClaim) -> Run {
        Run { claim }
    }

    /// The won tick's claim, for the thread that keeps it busy.
    pub(super) fn claim(&self) -> &TickClaim {
        &self.claim
    }

    /// The won tick's claim, to release it once the run is over.
    pub(super) fn into_claim(self) -> TickClaim {
        self.claim
    }

    /// The job's id.
    pub fn job_id(&self) -> &str {
        self.claim.job_id()
    }

    /// The tick being run.
    pub fn tick(&self) -> SystemTime {
        self.claim.tick()
    }

    /// The tick claim's token: one higher for every tick of the job won, a fencing token.
    pub fn token(&self) -> i64 {
        self.claim.token()
    }

    /// When the job's busy period ends at the latest, by this process's clock: stop by then, or
    /// the next tick's run may start beside this one (and this one's fence refuses its writes).
    /// The scheduler extends the busy period every third of it while the run goes on, so the
    /// deadline moves later as long as the database can be reached: read it again as you go.
    pub fn deadline(&self) -> Instant {
        self.claim.deadline()
    }

    /// Checks, inside a write's transaction, that this run is still the job's latest claim and
    /// busy (see [`TickClaim::fence`]).
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        self.claim.fence(tx)
    }

    /// This run's fence as a value (its tick claim's: job id, owner, token), for any driver to run
    /// inside its own transaction ([`crate::fence`]). [`Run::fence`] runs it.
    pub fn fence_statement(&self) -> Fence {
        self.claim.fence_statement()
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("job_id", &self.job_id())
            .field("tick", &self.tick())
            .field("token", &self.token())
            .finish()
    }
}
