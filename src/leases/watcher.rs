//! The deadline watcher: one thread per [`Leases`](crate::Leases) family that signals a lease's loss
//! at its local deadline even while the lease's renewal thread is stuck in a blocking call.
//!
//! A thread blocked inside `postgres::Client` (waiting on a row lock, on a blackholed socket, on the
//! pool) cannot watch a clock, so the watcher does: it keeps a heap of lease deadlines and wakes at
//! the earliest with crossbeam's `at`. When a deadline has passed (and was not pushed back by a
//! renewal), it marks the lease lost, sends `LossReason::Expired`, and cancels the statement the
//! lease had in flight through the connection's `CancelToken`, so the stuck thread returns too.
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
use postgres::{CancelToken, NoTls};

use super::lease::{LeaseState, Timer};
use crate::error::{Error, Result};

/// How long dropping the watcher waits for its threads (cancels and stuck renewals) to finish.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

pub(crate) enum Watch {
    /// Watch this lease's deadline (again, when it changed in a way a renewal does not cover).
    Lease(Arc<LeaseState>),
    /// A renewal thread that did not stop in time; cancel its statement and join it later.
    Reap(JoinHandle<()>, Option<CancelToken>),
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

struct Watched {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    leases: HashMap<u64, Arc<LeaseState>>,
    next_id: u64,
}

impl Watched {
    fn push(&mut self, when: Instant, state: Arc<LeaseState>) {
        let id = self.next_id;
        self.next_id += 1;
        self.heap.push(Reverse((when, id)));
        self.leases.insert(id, state);
    }

    fn next_due(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((when, _))| *when)
    }

    /// Pops every entry due at `now`.
    fn pop_due(&mut self, now: Instant) -> Vec<Arc<LeaseState>> {
        let mut due = Vec::new();
        while let Some(Reverse((when, id))) = self.heap.peek().copied() {
            if when > now {
                break;
            }
            self.heap.pop();
            if let Some(state) = self.leases.remove(&id) {
                due.push(state);
            }
        }
        due
    }
}

fn run(rx: Receiver<Watch>) {
    let mut watched = Watched {
        heap: BinaryHeap::new(),
        leases: HashMap::new(),
        next_id: 0,
    };
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let timer = watched.next_due().map_or_else(never, at);
        select! {
            recv(rx) -> msg => match msg {
                Ok(Watch::Lease(state)) => {
                    let when = state.next_check();
                    watched.push(when, state);
                }
                Ok(Watch::Reap(thread, cancel)) => {
                    threads.extend(cancel.and_then(spawn_cancel));
                    threads.push(thread);
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
    let deadline = Instant::now() + SHUTDOWN_WAIT;
    while !threads.is_empty() && Instant::now() < deadline {
        threads = reap(threads);
        thread::sleep(Duration::from_millis(5));
    }
    if !threads.is_empty() {
        log::warn!(
            target: "pgtenure::leases",
            "{} lease threads were still blocked on the database at shutdown; they finish on their own",
            threads.len()
        );
    }
}

/// Joins the threads that finished and keeps the others.
fn reap(threads: Vec<JoinHandle<()>>) -> Vec<JoinHandle<()>> {
    let (finished, running): (Vec<_>, Vec<_>) =
        threads.into_iter().partition(JoinHandle::is_finished);
    for thread in finished {
        let _ = thread.join();
    }
    running
}

/// Cancels a statement from a thread of its own: the cancel request opens a connection and may block.
fn spawn_cancel(token: CancelToken) -> Option<JoinHandle<()>> {
    let spawned = thread::Builder::new()
        .name("pgtenure-cancel".into())
        .spawn(move || {
            if let Err(e) = token.cancel_query(NoTls) {
                log::warn!(target: "pgtenure::leases", "could not cancel a stuck lease statement: {e}");
            }
        });
    match spawned {
        Ok(thread) => Some(thread),
        Err(e) => {
            log::warn!(target: "pgtenure::leases", "could not start a cancel thread: {e}");
            None
        }
    }
}
