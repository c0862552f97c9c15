//! A held [`Permit`]: a managed lease's tenure of one slot of a key, renewed on a thread of its own
//! by the lease machinery (`crate::leases::Lease`), its loss on a channel.

use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::error::Result;
use crate::fence::Fence;
use crate::leases::{Lease, LeaseLoss};

/// One held permit of a key, with a thread of its own that renews it.
///
/// It renews every third of its TTL, as a managed [`Lease`] does, and is lost the same ways:
/// [`LeaseLoss::Expired`] at the local deadline when no renewal succeeded in time (the thread may
/// be stuck on the database; the loss is signalled anyway), [`LeaseLoss::Refused`] when the
/// database says the permit is no longer this tenure's (it lapsed and another acquirer took the
/// slot, or an operator ended it). Loss is sent once on [`Permit::lost`]; from then on
/// [`Permit::is_held`] is false. The local deadline is taken before each grant or renewal is sent,
/// so it never falls after the database's expiry: stop the protected work when it passes.
///
/// [`Permit::release`] (or dropping the permit) stops the renewals and frees the slot, guarded by
/// owner and token, within 5 s in all, as [`Lease::release`] does.
pub struct Permit {
    lease: Lease,
    slot: u32,
    permits: u32,
}

impl Permit {
    pub(super) fn new(lease: Lease, slot: u32, permits: u32) -> Permit {
        Permit {
            lease,
            slot,
            permits,
        }
    }

    /// The key.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// The slot this permit holds, below the permits its acquire allowed.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The permits the acquire allowed (its `permits` argument).
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The permit's fencing token: larger than every token granted before it in the table (every
    /// permit of every key), and this tenure's alone. Fence every protected write with
    /// [`Permit::fence`], or stamp it on writes a downstream system orders by token.
    pub fn token(&self) -> i64 {
        self.lease.token()
    }

    /// Checks, inside the caller's transaction, that this permit (key, owner and token) is live by
    /// `clock_timestamp()`, and locks its row `FOR SHARE` until the transaction ends, so no other
    /// acquirer can take the slot (after a lapse) before it commits. Make the protected write only
    /// when it returns `true`: after a loss it returns `false`.
    ///
    /// The lock also makes the permit's renewal wait until the transaction ends: keep fenced
    /// transactions well inside a third of the TTL. For another driver, run
    /// [`Permit::fence_statement`].
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        self.lease.fence(tx)
    }

    /// This permit's fence as a value: the statement and its parameters (key, owner, token), for
    /// any driver to run inside its own transaction ([`crate::fence`]). [`Permit::fence`] runs it.
    pub fn fence_statement(&self) -> Fence {
        self.lease.fence_statement()
    }

    /// The TTL the permit renews with.
    pub fn ttl(&self) -> Duration {
        self.lease.ttl()
    }

    /// The local deadline: the permit is held until then at least by the database's clock, and
    /// moves forward with every successful renewal.
    pub fn deadline(&self) -> Instant {
        self.lease.deadline()
    }

    /// True while the permit is held: not lost, not released, and the local deadline not passed
    /// (checked against the clock on every call).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Why the permit was lost, once it was.
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.lease.loss()
    }

    /// The loss channel: yields the [`LeaseLoss`] once when the permit is lost. Releasing it
    /// yourself sends nothing. Select on it beside your work (`crossbeam_channel::select!`).
    pub fn lost(&self) -> &Receiver<LeaseLoss> {
        self.lease.lost()
    }

    /// Stops the renewals and frees the slot (guarded by owner and token, so it never frees
    /// another tenure); returns within 5 s. After a loss there is nothing to free and it returns
    /// within 100 ms.
    ///
    /// # Errors
    ///
    /// As [`Lease::release`]: a database or connection error from the release statement, or a
    /// timeout; the permit then lapses at its expiry.
    pub fn release(self) -> Result<()> {
        self.lease.release()
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.key())
            .field("slot", &self.slot)
            .field("permits", &self.permits)
            .field("token", &self.token())
            .field("ttl", &self.ttl())
            .field("held", &self.is_held())
            .field("loss", &self.loss())
            .finish()
    }
}
