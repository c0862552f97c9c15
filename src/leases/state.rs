//! A managed lease's state, shared by its handle, its thread and the deadline watcher: the status
//! machine (held, then lost or released by its owner), the local deadline, and the cancel key of the
//! statement in flight. No database: the transitions are unit-tested here.

use std::fmt;
use std::time::{Duration, Instant};

use crate::db::CancelKey;
use crate::observe;
use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::watcher::{Deadline, Timer};

/// Why a managed lease was lost; sent once on [`Lease::lost`](crate::leases::Lease::lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// The local deadline passed without a successful renewal (the database or the network failed or
    /// hung for longer than the lease's slack). The database may still show the row until its own
    /// expiry, which is never earlier.
    Expired,
    /// The database refused a renewal: the row is no longer this tenure's (taken after a lapse,
    /// deleted, released by someone else, force-released by an operator
    /// ([`Leases::force_release`](crate::leases::Leases::force_release)), or acquired again as a new tenure
    /// by this owner).
    Refused,
    /// A contender asked for the key ([`Leases::supersede`](crate::leases::Leases::supersede)). The row is
    /// still held; stop the work and release, and the contender acquires it.
    Superseded,
}

impl fmt::Display for LeaseLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseLoss::Expired => "expired: no renewal succeeded before the local deadline",
            LeaseLoss::Refused => "refused: the database says the lease is no longer ours",
            LeaseLoss::Superseded => "superseded: a contender asked for the key",
        })
    }
}

impl LeaseLoss {
    /// The reason as a metric's label (`expired`, `refused`, `superseded`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            LeaseLoss::Expired => "expired",
            LeaseLoss::Refused => "refused",
            LeaseLoss::Superseded => "superseded",
        }
    }
}

/// Which statement a lease has in flight (each clears only its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    Renew,
    Release,
}

/// Where a lease is in its life: held, then lost or released by its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Held,
    Lost(LeaseLoss),
    /// Being released by its owner; the release statement may run until the instant.
    Releasing(Instant),
    Released,
}

struct Inner {
    status: Status,
    deadline: Instant,
    in_flight: Option<(Purpose, CancelKey)>,
}

/// A managed lease's state, shared by its handle, its thread and the watcher.
pub(crate) struct LeaseState {
    pub(super) key: String,
    pub(super) token: i64,
    pub(super) ttl: Duration,
    pub(super) ttl_us: i64,
    inner: Mutex<Inner>,
    /// The loss, sent once (a one-slot channel). Not an ordered delivery of decisions
    /// ([`InOrder`](crate::deliver::InOrder), which a membership and a campaign use): a lease is
    /// lost at most once and never gained again by this handle, so there is no later gain its loss
    /// could be overtaken by, and no hook runs; `lose` decides it under `inner` and sends it once.
    loss: Sender<LeaseLoss>,
}

impl LeaseState {
    /// A held tenure whose local deadline is `deadline`; its loss goes to `loss`.
    pub(super) fn new(
        key: &str,
        token: i64,
        ttl: Duration,
        ttl_us: i64,
        deadline: Instant,
        loss: Sender<LeaseLoss>,
    ) -> LeaseState {
        observe::lease_held(true);
        LeaseState {
            key: key.to_owned(),
            token,
            ttl,
            ttl_us,
            inner: Mutex::new(Inner {
                status: Status::Held,
                deadline,
                in_flight: None,
            }),
            loss,
        }
    }

    pub(super) fn is_held(&self) -> bool {
        let inner = self.inner.lock();
        inner.status == Status::Held && Instant::now() < inner.deadline
    }

    pub(super) fn deadline(&self) -> Instant {
        self.inner.lock().deadline
    }

    pub(super) fn loss(&self) -> Option<LeaseLoss> {
        match self.inner.lock().status {
            Status::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// Marks the lease lost (once, only while held) and sends the reason.
    pub(super) fn lose(&self, reason: LeaseLoss) -> bool {
        {
            let mut inner = self.inner.lock();
            if inner.status != Status::Held {
                return false;
            }
            inner.status = Status::Lost(reason);
        }
        observe::lease_held(false);
        observe::lease_lost(reason.label());
        log::info!(target: "pgtenure::leases", "lease {:?} (token {}) lost: {reason}", self.key, self.token);
        // Bounded(1) and sent once: never blocks; a dropped receiver means nobody listens.
        let _ = self.loss.try_send(reason);
        true
    }

    /// Moves the local deadline to `deadline` after a successful renewal, unless no longer held.
    pub(super) fn extend(&self, deadline: Instant) -> bool {
        let mut inner = self.inner.lock();
        if inner.status != Status::Held {
            return false;
        }
        inner.deadline = inner.deadline.max(deadline);
        true
    }

    pub(super) fn set_in_flight(&self, purpose: Purpose, token: CancelKey) {
        self.inner.lock().in_flight = Some((purpose, token));
    }

    /// Clears this purpose's cancel key after its statement returned: `false` when the watcher took
    /// it meanwhile, so a cancel may still reach the connection's backend (a cancel names a
    /// backend, not a statement: that connection must not be used again).
    pub(super) fn clear_in_flight(&self, purpose: Purpose) -> bool {
        let mut inner = self.inner.lock();
        if inner.in_flight.as_ref().is_some_and(|(p, _)| *p == purpose) {
            inner.in_flight = None;
            true
        } else {
            false
        }
    }

    pub(super) fn take_in_flight(&self, purpose: Purpose) -> Option<CancelKey> {
        let mut inner = self.inner.lock();
        match inner.in_flight.take() {
            Some((p, token)) if p == purpose => Some(token),
            other => {
                inner.in_flight = other;
                None
            }
        }
    }

    /// Starts the owner's release; returns the status it had.
    pub(super) fn begin_release(&self, until: Instant) -> Status {
        let mut inner = self.inner.lock();
        let was = inner.status;
        inner.status = Status::Releasing(until);
        if was == Status::Held {
            observe::lease_held(false);
        }
        was
    }

    pub(super) fn end_release(&self) {
        self.inner.lock().status = Status::Released;
    }
}

/// The watcher's view of a lease: when to look at it, and what to do then.
impl Deadline for LeaseState {
    /// When the watcher should look at this lease next.
    fn next_check(&self) -> Instant {
        let inner = self.inner.lock();
        match inner.status {
            Status::Releasing(until) => until,
            _ => inner.deadline,
        }
    }

    /// The watcher's check: expire a lease whose deadline passed, cancel an overrunning release.
    fn on_timer(&self, now: Instant) -> Timer {
        let status = self.inner.lock().status;
        match status {
            Status::Held => {
                let deadline = self.deadline();
                if deadline > now {
                    Timer::Again(deadline)
                } else if self.lose(LeaseLoss::Expired) {
                    Timer::Cancel(self.take_in_flight(Purpose::Renew))
                } else {
                    Timer::Done
                }
            }
            Status::Releasing(until) if until > now => Timer::Again(until),
            Status::Releasing(_) => Timer::Cancel(self.take_in_flight(Purpose::Release)),
            Status::Lost(_) | Status::Released => Timer::Done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, Receiver};

    fn held(deadline: Instant) -> (LeaseState, Receiver<LeaseLoss>) {
        let (tx, rx) = bounded(1);
        let ttl = Duration::from_secs(3);
        (LeaseState::new("k", 7, ttl, 3_000_000, deadline, tx), rx)
    }

    #[test]
    fn a_held_lease_expires_once_at_its_deadline_and_says_so_once() {
        let now = Instant::now();
        let (state, lost) = held(now + Duration::from_secs(60));
        assert!(state.is_held());
        assert_eq!(state.next_check(), now + Duration::from_secs(60));
        // Early: look again at the deadline.
        assert!(
            matches!(state.on_timer(now), Timer::Again(t) if t == now + Duration::from_secs(60))
        );
        assert!(lost.try_recv().is_err());
        // At the deadline: lost, reason sent, nothing in flight to cancel.
        let later = now + Duration::from_secs(61);
        assert!(matches!(state.on_timer(later), Timer::Cancel(None)));
        assert_eq!(state.loss(), Some(LeaseLoss::Expired));
        assert_eq!(lost.try_recv(), Ok(LeaseLoss::Expired));
        // Lost stays lost: no second reason, no renewal moves it, the watcher is done with it.
        assert!(!state.lose(LeaseLoss::Refused));
        assert!(!state.extend(later + Duration::from_secs(60)));
        assert!(matches!(state.on_timer(later), Timer::Done));
        assert!(lost.try_recv().is_err());
        assert!(!state.is_held());
    }

    #[test]
    fn a_renewal_only_moves_the_deadline_forward() {
        let now = Instant::now();
        let (state, _lost) = held(now + Duration::from_secs(10));
        assert!(state.extend(now + Duration::from_secs(20)));
        assert_eq!(state.deadline(), now + Duration::from_secs(20));
        // A late answer to an older renewal never pulls it back.
        assert!(state.extend(now + Duration::from_secs(15)));
        assert_eq!(state.deadline(), now + Duration::from_secs(20));
    }

    #[test]
    fn a_lease_past_its_deadline_is_not_held_before_the_watcher_looks() {
        let (state, lost) = held(Instant::now() - Duration::from_millis(1));
        assert!(!state.is_held(), "the clock decides, not the watcher");
        assert_eq!(state.loss(), None, "the loss is the watcher's to send");
        assert!(lost.try_recv().is_err());
    }

    #[test]
    fn releasing_ends_renewals_and_an_overrunning_release_is_cancelled() {
        let now = Instant::now();
        let (state, lost) = held(now + Duration::from_secs(60));
        let until = now + Duration::from_secs(5);
        assert_eq!(state.begin_release(until), Status::Held);
        assert!(!state.is_held());
        assert!(
            !state.extend(now + Duration::from_secs(90)),
            "no renewal after release began"
        );
        assert_eq!(
            state.next_check(),
            until,
            "the watcher looks at the release's end"
        );
        assert!(matches!(state.on_timer(now), Timer::Again(t) if t == until));
        assert!(matches!(state.on_timer(until), Timer::Cancel(None)));
        state.end_release();
        assert!(matches!(state.on_timer(until), Timer::Done));
        assert!(
            !state.lose(LeaseLoss::Expired),
            "a released lease is never lost"
        );
        assert!(
            lost.try_recv().is_err(),
            "releasing it yourself sends nothing"
        );
    }

    #[test]
    fn a_superseded_lease_still_releases_and_its_reason_is_kept() {
        let now = Instant::now();
        let (state, lost) = held(now + Duration::from_secs(60));
        assert!(state.lose(LeaseLoss::Superseded));
        assert_eq!(lost.try_recv(), Ok(LeaseLoss::Superseded));
        assert_eq!(
            state.begin_release(now + Duration::from_secs(5)),
            Status::Lost(LeaseLoss::Superseded),
            "the release learns it was superseded, and still gives the row back"
        );
    }

    #[test]
    fn loss_never_blocks_when_nobody_listens() {
        let (state, lost) = held(Instant::now() + Duration::from_secs(60));
        drop(lost);
        assert!(state.lose(LeaseLoss::Refused));
        assert_eq!(state.loss(), Some(LeaseLoss::Refused));
    }
}
