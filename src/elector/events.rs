//! What a campaign tells ([`Elector::campaign`](super::Elector::campaign)): its events, why a
//! leadership was lost, and the hooks that hear them besides the events channel.

use std::fmt;

use super::LeaderInfo;
use crate::error::Error;

/// How many events [`Leadership::events`](super::Leadership::events) keeps unread; past that, the oldest are dropped (and
/// counted: [`Leadership::dropped_events`](super::Leadership::dropped_events)), so a campaign nobody reads the events of holds at most
/// this many.
pub const EVENTS_CAPACITY: usize = 64;

/// What a campaign tells ([`Leadership::events`](super::Leadership::events), [`LeaderHooks`]), in decision order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// This elector leads, with this term (a fencing token: [`Elector::fence`](super::Elector::fence)).
    Elected {
        /// The tenure's term.
        term: i64,
    },
    /// This elector no longer leads (or may not: see [`LeaderLoss::Expired`]): stop leader-only
    /// work.
    Lost {
        /// The term that ended.
        term: i64,
        /// Why.
        reason: LeaderLoss,
    },
    /// Who leads changed (another member, this one, or nobody), as a poll saw it.
    Observed(Option<LeaderInfo>),
}

/// Why a campaigning elector stopped leading.
///
/// New reasons may be added in minor releases, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaderLoss {
    /// No renewal succeeded before the tenure's local deadline (the database was unreachable or
    /// slow, or this process was paused): another member may lead now. The loss is final: the
    /// campaign resigns that term (should it still be live) and never renews it, so a later win
    /// is a new term and writes fenced by the lost one stay refused.
    Expired,
    /// A renewal found the tenure gone: another member took over (after this one's expiry by the
    /// database clock), or the row was changed from outside.
    Taken,
    /// Another member (or an operator) asked it to step down ([`Elector::request_resign`](super::Elector::request_resign)), as its
    /// renewal found; it resigns right after this is delivered.
    ResignRequested,
    /// [`Leadership::stop`](super::Leadership::stop) (or dropping the handle) ends it; it resigns right after this is
    /// delivered.
    Stopped,
    /// [`Elector::resign`](super::Elector::resign) was called on the campaigning elector (or a clone of it): it resigns
    /// right after this is delivered, stands aside for one TTL, then campaigns again.
    Resigned,
}

impl fmt::Display for LeaderLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaderLoss::Expired => "expired",
            LeaderLoss::Taken => "taken",
            LeaderLoss::ResignRequested => "resign requested",
            LeaderLoss::Stopped => "stopped",
            LeaderLoss::Resigned => "resigned",
        })
    }
}

impl LeaderLoss {
    /// The reason as a metric's label (`expired`, `taken`, `resign_requested`, `stopped`,
    /// `resigned`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            LeaderLoss::Expired => "expired",
            LeaderLoss::Taken => "taken",
            LeaderLoss::ResignRequested => "resign_requested",
            LeaderLoss::Stopped => "stopped",
            LeaderLoss::Resigned => "resigned",
        }
    }
}

/// Callbacks for those who prefer them to [`Leadership::events`](super::Leadership::events); every method defaults to doing
/// nothing. They run on the campaign's threads (the poller, or the watcher for
/// [`LeaderLoss::Expired`]), or on the thread calling [`Leadership::stop`](super::Leadership::stop) (or dropping the handle)
/// for [`LeaderLoss::Stopped`] and [`Elector::resign`](super::Elector::resign) for [`LeaderLoss::Resigned`], outside its locks, one at a time, in the order of the events: a loss
/// always before any later gain. Keep them short; later events wait for them.
pub trait LeaderHooks: Send + Sync {
    /// This elector leads with `term`.
    fn elected(&self, term: i64) {
        let _ = term;
    }
    /// This elector's tenure `term` ended for `reason`.
    fn lost(&self, term: i64, reason: LeaderLoss) {
        let _ = (term, reason);
    }
    /// Who leads changed.
    fn observed(&self, leader: Option<&LeaderInfo>) {
        let _ = leader;
    }
    /// A poll failed (logged too: at `error` when waiting cannot fix it).
    fn error(&self, error: &Error) {
        let _ = error;
    }
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLeaderHooks;

impl LeaderHooks for NoLeaderHooks {}
