//! A unit of work and the reconciler told when units are gained and lost.

use std::fmt;

use crate::error::Result;
use crate::input::check_key;

/// One unit of work: a shard of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    /// The tenant: not blank, no NUL byte, at most 1,024 bytes (checked before any statement).
    pub tenant: String,
    /// The shard.
    pub shard: i32,
}

impl Unit {
    /// A unit, with the tenant checked.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the tenant is blank,
    /// contains a NUL byte or is longer than 1,024 bytes.
    pub fn new(tenant: &str, shard: i32) -> Result<Unit> {
        check_key("tenant", tenant)?;
        Ok(Unit {
            tenant: tenant.to_owned(),
            shard,
        })
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.shard)
    }
}

/// Why units were lost ([`Reconciler::units_lost`]).
///
/// New reasons may be added in minor releases, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnitLoss {
    /// This process gives the unit back: it owned more than its fair share, or the unit's weight
    /// became 0 ([`Units::set_weight`](super::Units::set_weight)). Given back once this call
    /// returned.
    Shed,
    /// This process's liveness deadline passed without a heartbeat (it was paused, or the database
    /// was unreachable), or its row expired: another process may claim the unit now.
    Expired,
    /// The database no longer gives the unit to this process: another process claimed it (after
    /// this process's row expired), or it was freed or deleted from under it.
    Taken,
    /// The unit was unregistered ([`Units::remove`](super::Units::remove)); it is deleted once this
    /// call returned.
    Removed,
    /// [`Leaser::release`](super::Leaser::release) or
    /// [`Leaser::delete_process`](super::Leaser::delete_process) gives every unit back (a graceful
    /// shutdown).
    Released,
}

impl fmt::Display for UnitLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl UnitLoss {
    /// The reason as a metric's label: the same words as its `Display`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            UnitLoss::Shed => "shed",
            UnitLoss::Expired => "expired",
            UnitLoss::Taken => "taken",
            UnitLoss::Removed => "removed",
            UnitLoss::Released => "released",
        }
    }
}

/// What a [`Leaser`](super::Leaser) drives as ownership changes.
///
/// Every call comes from one delivery point, one at a time, in the order the leaser decided: a
/// loss is never overtaken by an older gain. Calls run on the leaser's threads (the
/// one that ticked, heartbeat or watched the deadline), outside its locks, so a callback may call
/// back into the leaser. Later messages wait for a call in progress, so keep each call shorter than
/// a fifth of the TTL: a unit to shed is given back only once `units_lost` returned, and at the local
/// deadline the loss must reach the application before the database lets another process claim.
///
/// That last message comes from a thread, which a starved machine may run late. Work that must never
/// overlap another process's should also check [`Leaser::owned`](super::Leaser::owned) or [`Leaser::live_until`](super::Leaser::live_until) (which
/// follow the clock, as [`Lease::is_held`](crate::leases::Lease::is_held) does) before each step, and fence
/// its writes.
pub trait Reconciler: Send + Sync {
    /// These units are now this process's: start their work.
    fn units_gained(&self, units: &[Unit]);
    /// These units are no longer this process's, or may not be, for `reason`: stop their work
    /// before returning. Called before `units_gained` in a tick. A unit chosen to shed (or removed)
    /// stays this process's in the database until this call has returned.
    fn units_lost(&self, units: &[Unit], reason: UnitLoss);
    /// How many deliveries of `unit` are in flight; shedding skips units with work in flight.
    /// Defaults to 0.
    fn in_flight(&self, unit: &Unit) -> usize {
        let _ = unit;
        0
    }
}
