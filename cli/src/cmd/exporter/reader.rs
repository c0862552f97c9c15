//! Reads of the tables for the requests: one at a time, on a thread of its own, shared by every
//! request that arrives while it runs, and waited for at most each request's own deadline. A database that stops
//! answering (a blackholed host holds a statement until the TCP timeouts end it, tens of seconds)
//! makes each scrape answer `pgtenure_exporter_up 0` within the deadline instead of outliving
//! Prometheus's scrape timeout; the read in flight goes on and later requests share it rather than
//! piling statements on a database in trouble.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::snapshot::{Snapshot, Tables};

/// What a read gave: the snapshot, or why there is none.
pub(super) type Read = Arc<Result<Snapshot, String>>;

#[derive(Debug, Default)]
struct State {
    /// Reads asked for: the one in flight (or about to start) when `asked > done`.
    asked: u64,
    /// Reads finished; `last` is the latest one's.
    done: u64,
    last: Option<Read>,
    /// The exporter stops: no read starts, and no request waits any more.
    stopping: bool,
    /// The last read whose lateness was said on stderr (said once per read, not per request).
    late_said: u64,
    /// The reading thread has returned.
    ended: bool,
}

/// The reader's state, shared by the reading thread and the requests, with the signal of its
/// changes.
#[derive(Debug, Default)]
struct StateCell {
    state: Mutex<State>,
    changed: Condvar,
}

impl StateCell {
    /// The state; a panic elsewhere while holding it leaves it whole (plain counters).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a change of `state`, `left` at most.
    fn wait<'a>(&self, state: MutexGuard<'a, State>, left: Duration) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, left)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// How long stopping waits for a read in flight: the command exits after, and a database that
/// does not answer must not keep it from exiting.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// The reading thread and the requests' way to it.
#[derive(Debug)]
pub(super) struct Reader {
    shared: Arc<StateCell>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    /// Starts the reading thread over `tables`.
    pub(super) fn start(tables: Tables) -> std::io::Result<Reader> {
        let shared = Arc::new(StateCell::default());
        let thread = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("pgtenure-read".into())
                .spawn(move || reads(&shared, &tables))?
        };
        Ok(Reader {
            shared,
            thread: Some(thread),
        })
    }

    /// The tables as read by the read in flight, or by a new one when none is: waits until
    /// `deadline` at most, then says the database did not answer in time (`waited` long).
    pub(super) fn read(&self, deadline: Instant) -> (Read, Duration) {
        let asked = Instant::now();
        let mut state = self.shared.lock();
        if state.asked == state.done {
            state.asked += 1;
            self.shared.changed.notify_all();
        }
        let wanted = state.asked;
        while state.done < wanted {
            if state.stopping {
                let stopping = "the exporter is stopping".to_owned();
                return (Arc::new(Err(stopping)), asked.elapsed());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let waited = asked.elapsed();
                let late = format!(
                    "the tables did not answer within {:.1} s (the database slow or unreachable); \
                     the read goes on, and the next scrapes share it",
                    waited.as_secs_f64()
                );
                if state.late_said < wanted {
                    state.late_said = wanted;
                    say!("pgtenure: exporter: cannot read the tables: {late}");
                }
                return (Arc::new(Err(late)), waited);
            }
            state = self.shared.wait(state, left);
        }
        let read = state.last.clone().expect("a finished read");
        let took = match &*read {
            Ok(snapshot) => snapshot.took,
            Err(_) => asked.elapsed(),
        };
        (read, took)
    }

    /// Stops the reads: the requests waiting for one are answered at once, with a failure saying
    /// the exporter stops, and so is every later one. The read in flight goes on ([`Drop`] waits
    /// for it a while).
    pub(super) fn release(&self) {
        let mut state = self.shared.lock();
        state.stopping = true;
        self.shared.changed.notify_all();
    }
}

impl Drop for Reader {
    /// Stops the reading thread and joins it: at once when idle, else when the read in flight
    /// ends, waiting [`STOP_WAIT`] at most. A read still waiting on the database then is left to
    /// end with the process, which exits next.
    fn drop(&mut self) {
        let deadline = Instant::now() + STOP_WAIT;
        let mut state = self.shared.lock();
        state.stopping = true;
        self.shared.changed.notify_all();
        while !state.ended {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                say!(
                    "pgtenure: exporter: a read of the tables still waits on the database; \
                     exiting without it"
                );
                return;
            }
            state = self.shared.wait(state, left);
        }
        drop(state);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The reading thread: a read each time one is asked for, until stopped.
fn reads(shared: &StateCell, tables: &Tables) {
    read_until_stopped(shared, tables);
    shared.lock().ended = true;
    shared.changed.notify_all();
}

fn read_until_stopped(shared: &StateCell, tables: &Tables) {
    loop {
        let wanted = {
            let mut state = shared.lock();
            while state.asked == state.done && !state.stopping {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stopping {
                return;
            }
            state.asked
        };
        let read = tables.read().map_err(|e| e.to_string());
        // Said once per read, however many requests share it.
        match &read {
            Ok(snapshot) => {
                for denied in &snapshot.denied {
                    say!(
                        "pgtenure: exporter: cannot read table {} ({}): {}",
                        denied.table,
                        denied.primitive,
                        denied.why
                    );
                }
            }
            Err(e) => say!("pgtenure: exporter: cannot read the tables: {e}"),
        }
        let mut state = shared.lock();
        state.done = wanted;
        state.last = Some(Arc::new(read));
        shared.changed.notify_all();
    }
}
