//! The one place a [`Leaser`](super::Leaser) tells its [`Reconciler`] anything.
//!
//! Ownership changes are decided on more than one thread: the tick (claims, sheds, what the database
//! says), the heartbeat (a lapse) and the liveness watcher (the local deadline). Each decision is
//! queued here while the decider still holds the leaser's local state, so the queue holds them in
//! the order they were made; whoever decided then delivers the queue, one delivery at a time, in
//! that order. So the application never hears "gained" after a "lost" that was decided later (a
//! slow `units_lost` on one thread cannot let another thread's older "gained" overtake it), which
//! would leave it working on units it no longer owns.
//!
//! The ordering itself is [`InOrder`], shared with the elector's campaign; this file says what a
//! membership's messages are and how they reach the reconciler.

use super::local::Losses;
use super::{Reconciler, Unit, UnitLoss};
use crate::deliver::InOrder;
use crate::observe;

/// One message for the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    Lost(Vec<Unit>, UnitLoss),
    Gained(Vec<Unit>),
}

/// Decisions waiting to be delivered, in decision order: a message's number is its [`InOrder`]
/// number. A reconciler that calls back into its leaser (a heartbeat from `units_lost`) delivers the
/// newer messages itself.
#[derive(Debug, Default)]
pub(crate) struct Outbox(InOrder<Delivery>);

impl Outbox {
    /// Queues a decision and returns its number (for [`Outbox::told`]); call it while holding the
    /// state the decision was made from. An empty decision is not queued, and counts as told.
    pub(crate) fn push(&self, delivery: Delivery) -> u64 {
        let empty = match &delivery {
            Delivery::Lost(units, _) | Delivery::Gained(units) => units.is_empty(),
        };
        if empty {
            // Nothing to tell: "told" once everything decided before it was.
            return self.0.last();
        }
        self.0.push(delivery)
    }

    /// Queues one decision's losses, a message per reason; returns the number of the last (see
    /// [`Outbox::push`]).
    pub(crate) fn push_losses(&self, losses: Losses) -> u64 {
        let mut last = self.push(Delivery::Lost(Vec::new(), UnitLoss::Taken));
        for (reason, units) in losses.0 {
            last = self.push(Delivery::Lost(units, reason));
        }
        last
    }

    /// Whether the calls for message `seq` and every earlier one have returned: a unit's work has
    /// stopped only once its `units_lost` returned, and only then may it be given back (an earlier
    /// call still running, such as the one a reconciler ticks from, may be draining it too). A call
    /// that panicked counts as returned: a number left in progress would hold its units forever.
    pub(crate) fn told(&self, seq: u64) -> bool {
        self.0.told(seq)
    }

    /// Delivers everything queued, in order; returns once the queue is empty (messages queued by
    /// others meanwhile included). Call it without holding the leaser's state.
    pub(crate) fn flush(&self, reconciler: &dyn Reconciler) {
        self.0.flush(|next| match next {
            Delivery::Lost(units, reason) => {
                observe::units_lost(reason.label(), units.len());
                reconciler.units_lost(&units, reason);
            }
            Delivery::Gained(units) => reconciler.units_gained(&units),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;

    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);

    impl Reconciler for Log {
        fn units_gained(&self, units: &[Unit]) {
            self.0.lock().push(format!("gained {}", units.len()));
        }
        fn units_lost(&self, units: &[Unit], _: UnitLoss) {
            // Slow, as a real drain is.
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.0.lock().push(format!("lost {}", units.len()));
        }
    }

    #[test]
    fn deliveries_keep_decision_order_across_threads() {
        let outbox = Arc::new(Outbox::default());
        let log = Arc::new(Log::default());
        let u = |n: i32| {
            (0..n)
                .map(|s| Unit::new("t", s).unwrap())
                .collect::<Vec<_>>()
        };
        outbox.push(Delivery::Lost(u(3), UnitLoss::Shed));
        outbox.push(Delivery::Gained(u(1)));
        outbox.push(Delivery::Gained(Vec::new()));
        // Two threads flush at once: one delivers, the other waits until the queue is empty.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (outbox, log) = (outbox.clone(), log.clone());
                std::thread::spawn(move || outbox.flush(&*log))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*log.0.lock(), ["lost 3", "gained 1"]);
    }

    /// Calls back into the outbox from `units_lost`, as a reconciler that ticks does.
    struct Nested {
        outbox: Arc<Outbox>,
        outer: u64,
        seen: Mutex<Vec<(bool, bool)>>,
    }

    impl Reconciler for Nested {
        fn units_gained(&self, _units: &[Unit]) {}
        fn units_lost(&self, units: &[Unit], _: UnitLoss) {
            if units.len() == 2 {
                let inner = self.outbox.push(Delivery::Lost(
                    vec![Unit::new("t", 9).unwrap()],
                    UnitLoss::Shed,
                ));
                self.outbox.flush(self);
                // The newer message was delivered inside, but the outer one is still being drained:
                // neither counts as told (the newer one's units may be the outer one's too).
                self.seen
                    .lock()
                    .push((self.outbox.told(inner), self.outbox.told(self.outer)));
                let nothing = self.outbox.push(Delivery::Lost(Vec::new(), UnitLoss::Shed));
                self.seen
                    .lock()
                    .push((self.outbox.told(nothing), self.outbox.told(self.outer)));
            }
        }
    }

    #[test]
    fn a_message_counts_as_told_only_once_its_call_returned() {
        let outbox = Arc::new(Outbox::default());
        let units = vec![Unit::new("t", 1).unwrap(), Unit::new("t", 2).unwrap()];
        let outer = outbox.push(Delivery::Lost(units, UnitLoss::Shed));
        assert!(!outbox.told(outer), "queued, not delivered");
        let nested = Nested {
            outbox: outbox.clone(),
            outer,
            seen: Mutex::new(Vec::new()),
        };
        outbox.flush(&nested);
        assert_eq!(*nested.seen.lock(), [(false, false), (false, false)]);
        assert!(outbox.told(outer));
        assert!(
            outbox.told(outbox.push(Delivery::Lost(Vec::new(), UnitLoss::Shed))),
            "nothing to tell"
        );
    }
}
