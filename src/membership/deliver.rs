//! The one place a [`Leaser`](super::Leaser) tells its [`Reconciler`] anything.
//!
//! Ownership changes are decided on more than one thread: the tick (claims, sheds, what the database
//! says), the heartbeat (a lapse) and the liveness watcher (the local deadline). Each decision is
//! queued here while the decider still holds the leaser's local state, so the queue holds them in
//! the order they were made; whoever decided then delivers the queue, one delivery at a time, in
//! that order. So the application never hears "gained" after a "lost" that was decided later (a
//! slow `units_lost` on one thread cannot let another thread's older "gained" overtake it), which
//! would leave it working on units it no longer owns.

use std::collections::VecDeque;

use parking_lot::{Mutex, ReentrantMutex};

use super::local::Losses;
use super::{Reconciler, Unit, UnitLoss};
use crate::observe;

/// One message for the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    Lost(Vec<Unit>, UnitLoss),
    Gained(Vec<Unit>),
}

/// Decisions waiting to be delivered, in decision order.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: Mutex<VecDeque<(u64, Delivery)>>,
    progress: Mutex<Progress>,
    /// Held while delivering, so deliveries never overlap or reorder. Reentrant: a reconciler that
    /// calls back into its leaser (a heartbeat from `units_lost`) delivers the newer messages itself.
    delivering: ReentrantMutex<()>,
}

/// Which deliveries have been made: each message has a number, in decision order.
#[derive(Default)]
struct Progress {
    /// The number the next message gets.
    next: u64,
    /// The highest number whose call began.
    started: u64,
    /// Numbers whose call began and has not returned (more than one only when a reconciler calls
    /// back into its leaser and that delivers newer messages inside the call).
    in_progress: Vec<u64>,
}

impl Outbox {
    /// Queues a decision and returns its number (for [`Outbox::told`]); call it while holding the
    /// state the decision was made from. An empty decision is not queued, and counts as told.
    pub(crate) fn push(&self, delivery: Delivery) -> u64 {
        let empty = match &delivery {
            Delivery::Lost(units, _) | Delivery::Gained(units) => units.is_empty(),
        };
        if empty {
            // Nothing to tell: "told" once everything decided before it was.
            return self.progress.lock().next;
        }
        let mut queue = self.queue.lock();
        let seq = {
            let mut progress = self.progress.lock();
            progress.next += 1;
            progress.next
        };
        queue.push_back((seq, delivery));
        seq
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
    /// call still running, such as the one a reconciler ticks from, may be draining it too).
    pub(crate) fn told(&self, seq: u64) -> bool {
        let progress = self.progress.lock();
        seq <= progress.started && progress.in_progress.iter().all(|s| *s > seq)
    }

    /// Delivers everything queued, in order; returns once the queue is empty (messages queued by
    /// others meanwhile included). Call it without holding the leaser's state.
    pub(crate) fn flush(&self, reconciler: &dyn Reconciler) {
        let _turn = self.delivering.lock();
        loop {
            let Some((seq, next)) = self.queue.lock().pop_front() else {
                return;
            };
            {
                let mut progress = self.progress.lock();
                progress.started = seq;
                progress.in_progress.push(seq);
            }
            // Also when the call panics: a number left in progress would hold its units forever.
            let _returned = Returned {
                progress: &self.progress,
                seq,
            };
            match next {
                Delivery::Lost(units, reason) => {
                    observe::units_lost(reason.label(), units.len());
                    reconciler.units_lost(&units, reason);
                }
                Delivery::Gained(units) => reconciler.units_gained(&units),
            }
        }
    }
}

/// Marks a delivery's call as returned when dropped.
struct Returned<'a> {
    progress: &'a Mutex<Progress>,
    seq: u64,
}

impl Drop for Returned<'_> {
    fn drop(&mut self) {
        self.progress.lock().in_progress.retain(|s| *s != self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    struct Panics;

    impl Reconciler for Panics {
        fn units_gained(&self, _units: &[Unit]) {}
        fn units_lost(&self, _units: &[Unit], _: UnitLoss) {
            panic!("a reconciler bug");
        }
    }

    #[test]
    fn a_call_that_panicked_counts_as_returned() {
        let outbox = Outbox::default();
        let seq = outbox.push(Delivery::Lost(
            vec![Unit::new("t", 1).unwrap()],
            UnitLoss::Shed,
        ));
        let flushed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outbox.flush(&Panics)));
        assert!(flushed.is_err());
        assert!(outbox.told(seq), "its units are not held forever");
    }
}
