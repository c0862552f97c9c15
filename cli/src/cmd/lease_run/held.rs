//! What lease-run holds while CMD runs: the lease KEY, or with `--permits N` one of the N permits
//! of the semaphore KEY. Both renew on the library's thread, are lost on a channel and fence with
//! a statement of key, owner and token, so the rest of lease-run treats them alike.

use std::time::Duration;

use pgtenure::crossbeam_channel::Receiver;
use pgtenure::fence::Fence;
use pgtenure::leases::{Lease, LeaseLoss, Leases, Refusal};
use pgtenure::semaphores::{Permit, Semaphore};
use pgtenure::Freed;

use crate::output::time;

/// Where lease-run takes what it holds.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// The lease table: the lease KEY.
    Lease(Leases),
    /// The semaphores table: one of `permits` permits of KEY.
    Permits(Semaphore, u32),
}

/// A held lease or permit.
pub(super) enum Held {
    Lease(Lease),
    Permit(Permit),
}

/// Why an acquire did not get the key.
pub(super) enum Refused {
    /// The lease's refusal, saying who holds it.
    Lease(Refusal),
    /// Every one of the N permits is held.
    Permits(u32),
    /// The statement failed, and is tried again.
    Failed,
}

impl Source {
    /// The owner written into the row.
    pub(super) fn owner(&self) -> &str {
        match self {
            Source::Lease(leases) => leases.owner(),
            Source::Permits(semaphore, _) => semaphore.owner(),
        }
    }

    /// Uses `owner` as the owner name.
    pub(super) fn with_owner(self, owner: &str) -> pgtenure::Result<Source> {
        Ok(match self {
            Source::Lease(leases) => Source::Lease(leases.with_owner(owner)?),
            Source::Permits(semaphore, n) => Source::Permits(semaphore.with_owner(owner)?, n),
        })
    }

    /// Creates the table (idempotent).
    pub(super) fn create_table(&self) -> pgtenure::Result<()> {
        match self {
            Source::Lease(leases) => leases.create_table(),
            Source::Permits(semaphore, _) => semaphore.create_table(),
        }
    }

    /// One acquire statement.
    pub(super) fn acquire(
        &self,
        key: &str,
        ttl: Duration,
    ) -> pgtenure::Result<Result<Held, Refused>> {
        Ok(match self {
            Source::Lease(leases) => leases
                .acquire_or_refusal(key, ttl)?
                .map(Held::Lease)
                .map_err(Refused::Lease),
            Source::Permits(semaphore, n) => semaphore
                .acquire(key, *n, ttl)?
                .map(Held::Permit)
                .ok_or(Refused::Permits(*n)),
        })
    }

    /// Wake-ups when KEY is released elsewhere, for a lease (with handover notifications on);
    /// `None` for permits, which are polled for.
    pub(super) fn watch_released(&self, key: &str) -> pgtenure::Result<Option<Freed>> {
        match self {
            Source::Lease(leases) => leases.watch_released(key).map(Some),
            Source::Permits(..) => Ok(None),
        }
    }

    /// What is held: `lease "KEY"` or `a permit of "KEY"`.
    pub(super) fn what(&self, key: &str) -> String {
        match self {
            Source::Lease(_) => format!("lease {key:?}"),
            Source::Permits(_, n) => format!("a permit of {key:?} (of {n})"),
        }
    }
}

impl Held {
    /// The fencing token.
    pub(super) fn token(&self) -> i64 {
        match self {
            Held::Lease(lease) => lease.token(),
            Held::Permit(permit) => permit.token(),
        }
    }

    /// The permit's slot; `None` for a lease.
    pub(super) fn slot(&self) -> Option<u32> {
        match self {
            Held::Lease(_) => None,
            Held::Permit(permit) => Some(permit.slot()),
        }
    }

    /// The fence statement, for CMD.
    pub(super) fn fence_statement(&self) -> Fence {
        match self {
            Held::Lease(lease) => lease.fence_statement(),
            Held::Permit(permit) => permit.fence_statement(),
        }
    }

    /// The loss channel.
    pub(super) fn lost(&self) -> &Receiver<LeaseLoss> {
        match self {
            Held::Lease(lease) => lease.lost(),
            Held::Permit(permit) => permit.lost(),
        }
    }

    /// Releases it (guarded by owner and token).
    pub(super) fn release(self) -> pgtenure::Result<()> {
        match self {
            Held::Lease(lease) => lease.release(),
            Held::Permit(permit) => permit.release(),
        }
    }
}

/// Who holds the key, for the not-acquired message.
pub(super) fn describe(refused: &Refused) -> String {
    let refusal = match refused {
        Refused::Lease(refusal) => refusal,
        Refused::Permits(n) => {
            return format!(
                "all {n} permits are held (pgtenure semaphores --prefix KEY lists their holders)"
            )
        }
        Refused::Failed => return "its last acquire failed".to_owned(),
    };
    match refusal {
        Refusal::OtherOwner(row) => format!(
            "held by {} (token {}) until {}",
            row.owner,
            row.token,
            time(row.held_until)
        ),
        Refusal::SameOwner(row) => format!(
            "held under this owner name, {}, by another process (token {}) until {}",
            row.owner,
            row.token,
            time(row.held_until)
        ),
        Refusal::ThisFamily(_) => "held by this process".to_owned(),
        Refusal::HeldOff { until, .. } => format!(
            "the server was promoted from a standby, and keys that lapsed or were released are \
             granted again from {} (one longest TTL after the promotion, so that no holder whose \
             last renewals the standby missed still believes it holds the key)",
            time(*until)
        ),
        _ => "it was released just after it was refused; try again".to_owned(),
    }
}
