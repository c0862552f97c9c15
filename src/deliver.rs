//! Ordered delivery of decisions (invariant 10: a loss is delivered before any later gain; every
//! delivery in decision order), written once for the primitives that decide on more than one thread:
//! a membership's [`Outbox`](crate::membership) and a campaign's events
//! ([`Leadership`](crate::elector::Leadership)).
//!
//! A decision is pushed while its decider still holds the state it was made from, so the queue holds
//! decisions in the order they were made; whoever decided then flushes the queue, one delivery at a
//! time, in that order. So a slow callback for a loss on one thread cannot let another thread's older
//! gain overtake it.
//!
//! A lease's loss channel is not this problem: a lease is lost once and never gained again, so its one
//! event needs no order against others (see `LeaseState`).

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use parking_lot::{Mutex, ReentrantMutex};

/// Events waiting to be delivered, in the order they were pushed; see the [module docs](self).
pub(crate) struct InOrder<E> {
    queue: Mutex<VecDeque<(u64, E)>>,
    progress: Mutex<Progress>,
    /// Held while delivering, so deliveries never overlap or reorder. Reentrant: a callback that
    /// calls back in (a reconciler's heartbeat from `units_lost`) delivers the newer events itself.
    delivering: ReentrantMutex<()>,
}

/// Which deliveries have been made: each event has a number, in push order.
#[derive(Debug, Default)]
struct Progress {
    /// The number the last event pushed got (the next gets one more).
    last: u64,
    /// The highest number whose call began.
    started: u64,
    /// Numbers whose call began and has not returned (more than one only when a callback calls back
    /// in and that delivers newer events inside the call).
    in_progress: Vec<u64>,
}

impl<E> Default for InOrder<E> {
    fn default() -> Self {
        InOrder {
            queue: Mutex::new(VecDeque::new()),
            progress: Mutex::new(Progress::default()),
            delivering: ReentrantMutex::new(()),
        }
    }
}

impl<E> fmt::Debug for InOrder<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InOrder")
            .field("queued", &self.queue.lock().len())
            .field("progress", &*self.progress.lock())
            .finish()
    }
}

impl<E> InOrder<E> {
    /// Queues `event` and returns its number (for [`InOrder::told`]); call it while holding the state
    /// the decision was made from.
    pub(crate) fn push(&self, event: E) -> u64 {
        let mut queue = self.queue.lock();
        let seq = {
            let mut progress = self.progress.lock();
            progress.last += 1;
            progress.last
        };
        queue.push_back((seq, event));
        seq
    }

    /// The number of the last event pushed, for a decision with nothing to tell: it counts as told
    /// once everything decided before it was.
    pub(crate) fn last(&self) -> u64 {
        self.progress.lock().last
    }

    /// Whether the calls for event `seq` and every earlier one have returned (a call that panicked
    /// counts as returned). An earlier call still running, such as the one a callback calls back in
    /// from, keeps it untold.
    pub(crate) fn told(&self, seq: u64) -> bool {
        let progress = self.progress.lock();
        seq <= progress.started && progress.in_progress.iter().all(|s| *s > seq)
    }

    /// Whether the calling thread is delivering now (inside `deliver`, at any depth).
    pub(crate) fn is_delivering_here(&self) -> bool {
        self.delivering.is_owned_by_current_thread()
    }

    /// Delivers everything queued to `deliver`, in order, one call at a time; returns once the queue
    /// is empty (events pushed by others meanwhile included). Call it without holding the decider's
    /// state. A panic in `deliver` propagates; the event it was given counts as told, and the events
    /// after it wait for the next flush.
    pub(crate) fn flush(&self, mut deliver: impl FnMut(E)) {
        let _turn = self.delivering.lock();
        loop {
            let Some((seq, event)) = self.queue.lock().pop_front() else {
                return;
            };
            {
                let mut progress = self.progress.lock();
                progress.started = seq;
                progress.in_progress.push(seq);
            }
            // Also when the call panics: a number left in progress would hold its event untold
            // forever.
            let _returned = Returned {
                progress: &self.progress,
                seq,
            };
            deliver(event);
        }
    }

    /// [`InOrder::flush`] on a thread that must not unwind from the callback (the caller of a
    /// handle's `stop`, or a `Drop`): a panic in `deliver` is caught and returned for the caller to
    /// log. The events after the one that panicked wait for the next flush.
    pub(crate) fn flush_caught(
        &self,
        deliver: impl FnMut(E),
    ) -> std::result::Result<(), Box<dyn Any + Send>> {
        catch_unwind(AssertUnwindSafe(|| self.flush(deliver)))
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
    use std::time::Duration;

    #[test]
    fn deliveries_keep_push_order_across_threads() {
        let events = Arc::new(InOrder::default());
        let log = Arc::new(Mutex::new(Vec::new()));
        events.push("lost 3");
        events.push("gained 1");
        // Two threads flush at once: one delivers, the other waits until the queue is empty.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (events, log) = (events.clone(), log.clone());
                std::thread::spawn(move || {
                    events.flush(|e| {
                        if e.starts_with("lost") {
                            // Slow, as a real drain is.
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        log.lock().push(e);
                    })
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*log.lock(), ["lost 3", "gained 1"]);
    }

    #[test]
    fn an_event_counts_as_told_only_once_its_call_returned() {
        let events = InOrder::default();
        let outer = events.push(2);
        assert!(!events.told(outer), "queued, not delivered");
        let mut seen = Vec::new();
        let mut deliver = |n: i32| {
            // Calls back in from the outer call, as a reconciler that ticks does.
            if n == 2 {
                let inner = events.push(1);
                events.flush(|_| {});
                // The newer event was delivered inside, but the outer one is still being
                // drained: neither counts as told (the newer one's units may be the outer one's).
                seen.push((events.told(inner), events.told(outer)));
                let nothing = events.last();
                seen.push((events.told(nothing), events.told(outer)));
            }
        };
        events.flush(&mut deliver);
        assert_eq!(seen, [(false, false), (false, false)]);
        assert!(events.told(outer));
        assert!(events.told(events.last()), "nothing to tell");
    }

    #[test]
    fn a_call_that_panicked_counts_as_returned() {
        let events = InOrder::default();
        let seq = events.push(1);
        let flushed = catch_unwind(AssertUnwindSafe(|| {
            events.flush(|_: i32| panic!("a reconciler bug"))
        }));
        assert!(flushed.is_err());
        assert!(events.told(seq), "its event is not held forever");
    }

    #[test]
    fn a_caught_panic_is_returned_and_the_later_events_wait_for_the_next_flush() {
        let events = InOrder::default();
        let (first, second) = (events.push(1), events.push(2));
        let mut delivered = Vec::new();
        let caught = events.flush_caught(|n: i32| {
            delivered.push(n);
            if n == 1 {
                panic!("a hook bug");
            }
        });
        assert!(caught.is_err(), "the panic is the caller's to log");
        assert_eq!(delivered, [1]);
        assert!(events.told(first));
        assert!(!events.told(second), "not delivered yet");
        assert!(!events.is_delivering_here(), "the turn was given back");
        assert!(events.flush_caught(|n| delivered.push(n)).is_ok());
        assert_eq!(delivered, [1, 2]);
        assert!(events.told(second));
    }

    #[test]
    fn only_the_delivering_thread_is_delivering_and_only_while_it_delivers() {
        let events = Arc::new(InOrder::default());
        events.push(());
        assert!(!events.is_delivering_here());
        let mut inside = Vec::new();
        events.flush(|()| {
            inside.push(events.is_delivering_here());
            let other = {
                let events = events.clone();
                std::thread::spawn(move || events.is_delivering_here())
            };
            inside.push(other.join().unwrap());
        });
        assert_eq!(inside, [true, false]);
        assert!(!events.is_delivering_here());
    }

    #[test]
    fn a_flush_from_a_callback_delivers_the_newer_events_in_order() {
        let events = InOrder::default();
        events.push(1);
        let log = Mutex::new(Vec::new());
        events.flush(|n: i32| {
            log.lock().push(n);
            if n == 1 {
                events.push(2);
                events.push(3);
                events.flush(|n| log.lock().push(n));
            }
        });
        assert_eq!(*log.lock(), [1, 2, 3]);
    }
}
