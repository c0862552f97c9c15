//! The deadline watcher: one thread per [`Leases`](crate::leases::Leases) family that signals a lease's loss
//! at its local deadline even while the lease's renewal thread is stuck in a blocking call.
//!
//! A thread blocked inside `postgres::Client` (waiting on a row lock, on a blackholed socket, on the
//! pool) cannot watch a clock, so the watcher does: it keeps a heap of lease deadlines and wakes at
//! the earliest with crossbeam's `at`. When a deadline has passed (and was not pushed back by a
//! renewal), it marks the lease lost, sends `LeaseLoss::Expired`, and cancels the statement the
//! lease had in flight through the connection's `CancelKey`, so the stuck thread returns too.
//! Cancels run on short-lived threads of the watcher's own (a cancel opens a connection and may block
//! on a dead network), which it joins. Renewal threads that a `Lease` could not join within its drop
//! bound are handed here and joined once they finish.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{
    at, bounded, never, select, unbounded, Receiver, RecvTimeoutError, Sender,
};

use crate::db::CancelKey;
use crate::error::{Error, Result};

/// How long dropping the watcher waits for its threads (cancels and stuck renewals) to finish.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// Something with a deadline the watcher keeps: a managed lease, to the watcher nothing more.
pub(crate) trait Deadline: Send + Sync {
    /// When to look at it next.
    fn next_check(&self) -> Instant;
    /// Its time came (at `now`, or later): what to do.
    fn on_timer(&self, now: Instant) -> Timer;
}

/// What the watcher does with a deadline whose time came.
pub(crate) enum Timer {
    /// Nothing more to watch.
    Done,
    /// Check again then.
    Again(Instant),
    /// Cancel this statement (the lease just expired, or its release overran).
    Cancel(Option<CancelKey>),
}

pub(crate) enum Watch {
    /// Watch this deadline (again, when it changed in a way a renewal does not cover).
    Deadline(Arc<dyn Deadline>),
    /// A renewal thread that did not stop in time, with a receiver that disconnects when it ends;
    /// cancel its statement and join it later.
    Reap(JoinHandle<()>, Receiver<Result<()>>, Option<CancelKey>),
}

/// A thread the watcher joins once it ends: `exited` disconnects when it does.
struct Owned {
    thread: JoinHandle<()>,
    exited: Receiver<Result<()>>,
}

/// The handle that owns the watcher thread; dropping it stops and joins the thread (bounded).
pub(crate) struct Watcher {
    tx: Option<Sender<Watch>>,
    done: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    pub(crate) fn start() -> Result<Watcher> {
        let (tx, rx) = unbounded();
        let (done_tx, done) = bounded::<()>(0);
        let thread = thread::Builder::new()
            .name("pgtenure-watch".into())
            .spawn(move || {
                run(rx);
                drop(done_tx);
            })
            .map_err(|e| {
                Error::setup("could not start the lease deadline watcher thread").with_source(e)
            })?;
        Ok(Watcher {
            tx: Some(tx),
            done,
            thread: Some(thread),
        })
    }

    pub(crate) fn send(&self, watch: Watch) {
        if let Some(tx) = &self.tx {
            // The watcher only stops when this handle is dropped, so the send cannot fail here.
            let _ = tx.send(watch);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        drop(self.tx.take());
        // The watcher itself waits up to SHUTDOWN_WAIT for its threads; allow a little more.
        let finished = matches!(
            self.done
                .recv_timeout(SHUTDOWN_WAIT + Duration::from_millis(500)),
            Err(RecvTimeoutError::Disconnected)
        );
        match self.thread.take() {
            Some(thread) if finished => {
                let _ = thread.join();
            }
            Some(_) => log::error!(
                target: "pgtenure::leases",
                "lease deadline watcher did not stop in time; leaving it to finish on its own"
            ),
            None => {}
        }
    }
}

/// The deadlines watched, earliest first.
struct Deadlines<T> {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: HashMap<u64, T>,
    next_id: u64,
}

impl<T> Deadlines<T> {
    fn new() -> Deadlines<T> {
        Deadlines {
            heap: BinaryHeap::new(),
            entries: HashMap::new(),
            next_id: 0,
        }
    }

    fn push(&mut self, when: Instant, entry: T) {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((when, id)));
        self.entries.insert(id, entry);
    }

    fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((when, _))| *when)
    }

    /// Pops every entry due at `now`, earliest first (in push order among equal instants).
    fn pop_due(&mut self, now: Instant) -> Vec<T> {
        let mut due = Vec::new();
        while let Some(Reverse((when, id))) = self.heap.peek().copied() {
            if when > now {
                break;
            }
            self.heap.pop();
            if let Some(entry) = self.entries.remove(&id) {
                due.push(entry);
            }
        }
        due
    }
}

fn run(rx: Receiver<Watch>) {
    let mut watched: Deadlines<Arc<dyn Deadline>> = Deadlines::new();
    let mut threads: Vec<Owned> = Vec::new();
    loop {
        let timer = watched.next_due().map_or_else(never, at);
        select! {
            recv(rx) -> msg => match msg {
                Ok(Watch::Deadline(state)) => {
                    let when = state.next_check();
                    watched.push(when, state);
                }
                Ok(Watch::Reap(thread, exited, cancel)) => {
                    threads.extend(cancel.and_then(spawn_cancel));
                    threads.push(Owned { thread, exited });
                }
                Err(_) => break,
            },
            recv(timer) -> _ => {}
        }
        let now = Instant::now();
        for state in watched.pop_due(now) {
            match state.on_timer(now) {
                Timer::Done => {}
                Timer::Again(when) => watched.push(when, state),
                Timer::Cancel(token) => threads.extend(token.and_then(spawn_cancel)),
            }
        }
        threads = reap(threads);
    }
    // Wait for each thread to end, all against one deadline.
    let deadline = Instant::now() + SHUTDOWN_WAIT;
    let mut stuck = 0;
    for owned in threads {
        if ended_by(&owned.exited, deadline) {
            let _ = owned.thread.join();
        } else {
            stuck += 1;
        }
    }
    if stuck > 0 {
        log::warn!(
            target: "pgtenure::leases",
            "{stuck} lease threads were still blocked on the database at shutdown; they finish on their own"
        );
    }
}

/// Whether the thread behind `exited` ended by `deadline` (its channel disconnected).
fn ended_by(exited: &Receiver<Result<()>>, deadline: Instant) -> bool {
    loop {
        match exited.recv_deadline(deadline) {
            Ok(_) => continue,
            Err(RecvTimeoutError::Disconnected) => return true,
            Err(RecvTimeoutError::Timeout) => return false,
        }
    }
}

/// Joins the threads that finished and keeps the others.
fn reap(threads: Vec<Owned>) -> Vec<Owned> {
    let (finished, running): (Vec<_>, Vec<_>) = threads
        .into_iter()
        .partition(|owned| owned.thread.is_finished());
    for owned in finished {
        let _ = owned.thread.join();
    }
    running
}

/// Cancels a statement from a thread of its own: the cancel request opens a connection and may block.
fn spawn_cancel(token: CancelKey) -> Option<Owned> {
    let (ends, exited) = bounded::<Result<()>>(0);
    let spawned = thread::Builder::new()
        .name("pgtenure-cancel".into())
        .spawn(move || {
            let _ends = ends;
            if let Err(e) = token.cancel() {
                log::warn!(target: "pgtenure::leases", "could not cancel a stuck lease statement: {e}");
            }
        });
    match spawned {
        Ok(thread) => Some(Owned { thread, exited }),
        Err(e) => {
            log::warn!(target: "pgtenure::leases", "could not start a cancel thread: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_pop_earliest_first_and_only_when_due() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d: Deadlines<&str> = Deadlines::new();
        d.push(t0 + ms(30), "c");
        d.push(t0 + ms(10), "a");
        d.push(t0 + ms(20), "b");
        d.push(t0 + ms(10), "a2");
        assert_eq!(d.next_due(), Some(t0 + ms(10)));
        assert!(d.pop_due(t0).is_empty(), "nothing is due yet");
        assert_eq!(d.pop_due(t0 + ms(20)), ["a", "a2", "b"]);
        assert_eq!(d.next_due(), Some(t0 + ms(30)));
        assert_eq!(d.pop_due(t0 + ms(100)), ["c"]);
        assert_eq!(d.next_due(), None);
    }

    /// A deadline that expires once, like a lease that is not renewed.
    struct Once {
        at: Instant,
        fired: parking_lot::Mutex<u32>,
    }

    impl Deadline for Once {
        fn next_check(&self) -> Instant {
            self.at
        }
        fn on_timer(&self, now: Instant) -> Timer {
            if now < self.at {
                return Timer::Again(self.at);
            }
            *self.fired.lock() += 1;
            Timer::Done
        }
    }

    #[test]
    fn the_watcher_fires_a_deadline_once_at_its_time_and_stops_when_dropped() {
        let watcher = Watcher::start().unwrap();
        let once = Arc::new(Once {
            at: Instant::now() + Duration::from_millis(50),
            fired: parking_lot::Mutex::new(0),
        });
        watcher.send(Watch::Deadline(once.clone()));
        let give_up = Instant::now() + Duration::from_secs(5);
        while *once.fired.lock() == 0 {
            assert!(Instant::now() < give_up, "the deadline never fired");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(Instant::now() >= once.at, "fired before its time");
        let started = Instant::now();
        drop(watcher);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "stopping took {:?}",
            started.elapsed()
        );
        assert_eq!(*once.fired.lock(), 1);
    }
}
