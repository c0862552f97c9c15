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

use super::{Reconciler, Unit};

/// One message for the reconciler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Delivery {
    Lost(Vec<Unit>),
    Gained(Vec<Unit>),
}

/// Decisions waiting to be delivered, in decision order.
#[derive(Default)]
pub(crate) struct Outbox {
    queue: Mutex<VecDeque<Delivery>>,
    /// Held while delivering, so deliveries never overlap or reorder. Reentrant: a reconciler that
    /// calls back into its leaser (a heartbeat from `units_lost`) delivers the newer messages itself.
    delivering: ReentrantMutex<()>,
}

impl Outbox {
    /// Queues a decision; call it while holding the state the decision was made from.
    pub(crate) fn push(&self, delivery: Delivery) {
        let empty = match &delivery {
            Delivery::Lost(units) | Delivery::Gained(units) => units.is_empty(),
        };
        if !empty {
            self.queue.lock().push_back(delivery);
        }
    }

    /// Delivers everything queued, in order; returns once the queue is empty (messages queued by
    /// others meanwhile included). Call it without holding the leaser's state.
    pub(crate) fn flush(&self, reconciler: &dyn Reconciler) {
        let _turn = self.delivering.lock();
        loop {
            let next = self.queue.lock().pop_front();
            match next {
                None => return,
                Some(Delivery::Lost(units)) => reconciler.units_lost(&units),
                Some(Delivery::Gained(units)) => reconciler.units_gained(&units),
            }
        }
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
        fn units_lost(&self, units: &[Unit]) {
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
        outbox.push(Delivery::Lost(u(3)));
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
}
