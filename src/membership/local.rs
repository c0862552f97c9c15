//! A leaser's local state: what it owns, what it is shedding, its liveness deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::leaser::weight_of;
use super::unit::Unit;

#[derive(Default)]
pub(super) struct Local {
    /// Shared with a running tick, which copies it only if it changes something (copy on write).
    pub(super) owned: Arc<BTreeMap<Unit, i32>>,
    /// The total weight of `owned`, kept with it.
    pub(super) owned_weight: i64,
    /// Bumped whenever ownership is forgotten, so a tick that started before does not adopt its view.
    pub(super) generation: u64,
    pub(super) ready: bool,
    pub(super) reread: bool,
    pub(super) last_beat: Option<Instant>,
    /// The local liveness deadline: the instant before the last successful heartbeat was sent, plus
    /// four fifths of the TTL (see [`stop_after`]). It falls a fifth of the TTL before the database's
    /// expiry of the row, so past it this process must not act on its units, and its reconciler hears
    /// so before another process may claim them.
    pub(super) live_until: Option<Instant>,
    /// Units chosen to shed: the reconciler has been told they are lost, the database still says
    /// they are this process's until the shed statement commits. Never in `owned`, never re-read
    /// into it, and counted as owned in what the process row reports.
    pub(super) shedding: BTreeMap<Unit, i32>,
    /// The process row's counter of changes others made to its units, when `owned` was last known
    /// to match the database: while it stays put, a tick need not re-read the units.
    pub(super) seen_changes: Option<i64>,
}

/// How long after a heartbeat was sent a process acts on its units: four fifths of the TTL. The
/// last fifth is for telling the reconciler, which may be busy with an earlier callback, before the
/// database lets another process claim the units.
pub(super) fn stop_after(ttl: Duration) -> Duration {
    ttl - ttl / 5
}

impl Local {
    pub(super) fn live_at(&self, now: Instant) -> bool {
        self.live_until.is_some_and(|until| now < until)
    }

    /// Forgets every owned unit, returning them (to report as lost); the next tick re-reads.
    pub(super) fn forget_all(&mut self) -> Vec<Unit> {
        self.reread = true;
        self.generation += 1;
        self.owned_weight = 0;
        self.shedding.clear();
        Arc::unwrap_or_clone(std::mem::take(&mut self.owned))
            .into_keys()
            .collect()
    }

    /// What the database says this process owns: its units and those it is shedding.
    pub(super) fn reported(&self) -> (i32, i64) {
        let count = self.owned.len() + self.shedding.len();
        (count as i32, self.owned_weight + weight_of(&self.shedding))
    }
}
