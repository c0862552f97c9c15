//! The membership loop and its liveness watcher.

use std::time::{Duration, Instant};

use crossbeam_channel::{after, at, bounded, never, select, Receiver};

use super::leaser::Leaser;
use crate::error::{Error, ErrorKind, Result};

/// First and longest wait between heartbeats while `run` waits for the database at startup.
const STARTUP_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

impl Leaser {
    /// Runs the membership loop on the calling thread until `shutdown` yields or disconnects.
    ///
    /// Heartbeats until the process row is live, retrying with backoff (1 s doubling to 30 s), so a
    /// database that is unreachable at startup delays the process instead of stopping it. Then
    /// ticks at once, and interleaves heartbeats, rebalances and sweeps on their intervals (a
    /// heartbeat that finds the row had expired triggers a tick at once). Returns after the database
    /// call in progress when the signal comes; each call is bounded by the pool's connection timeout
    /// and the TCP timeouts (see [`Db`](crate::Db)).
    ///
    /// Errors that waiting cannot fix (a missing table or privilege, refused credentials: every kind
    /// but [`Connection`](crate::ErrorKind::Connection) and
    /// [`Serialization`](crate::ErrorKind::Serialization)) end the loop at startup, before the first
    /// successful heartbeat, with that error; later, every loop error is logged (those at `error`)
    /// and reported to [`Hooks::error`](super::Hooks::error), and the loop goes on.
    ///
    /// While it runs, a watcher thread of its own (`pgtenure-member`, joined before `run` returns)
    /// reports every owned unit lost at the local liveness deadline if no heartbeat succeeded by then,
    /// even while the loop is stuck in a database call: the process stops its work no later than the
    /// database lets another process claim the units.
    ///
    /// Graceful shutdown: signal, join the thread, then [`Leaser::release`] and
    /// [`Leaser::delete_process`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the watcher thread cannot be started; a
    /// permanent error at startup (see above); the last heartbeat error when the signal came before
    /// any heartbeat succeeded (a loop that failed all along never returns `Ok`).
    pub fn run(&self, shutdown: &Receiver<()>) -> Result<()> {
        let (wake, woken) = bounded::<()>(1);
        *self.watch.lock() = Some(wake);
        let result = std::thread::scope(|scope| {
            let watcher = std::thread::Builder::new()
                .name("pgtenure-member".into())
                .spawn_scoped(scope, || self.watch_liveness(&woken))
                .map_err(|e| {
                    Error::setup("could not start the membership liveness watcher").with_source(e)
                });
            let result = watcher.and_then(|_| self.run_loop(shutdown));
            // Disconnecting the wake channel stops the watcher; the scope joins it.
            self.watch.lock().take();
            result
        });
        result
    }

    /// Reports every owned unit lost at the local liveness deadline, even while the run loop is stuck
    /// in a database call (the deadline is re-read after every wake-up, so none is missed).
    fn watch_liveness(&self, woken: &Receiver<()>) {
        loop {
            let deadline = self.live_until().filter(|d| *d > Instant::now());
            select! {
                recv(woken) -> msg => if msg.is_err() { return },
                recv(deadline.map_or_else(never, at)) -> _ => self.expire_if_due(),
            }
        }
    }

    fn run_loop(&self, shutdown: &Receiver<()>) -> Result<()> {
        let (mut backoff, max_backoff) = STARTUP_BACKOFF;
        loop {
            match self.heartbeat() {
                Ok(()) => break,
                Err(e) if permanent(&e) => {
                    log::error!(
                        target: "pgtenure::membership",
                        "process {} cannot start: {e}",
                        self.process_id
                    );
                    self.hooks.error(&e);
                    return Err(e);
                }
                Err(e) => {
                    log::warn!(
                        target: "pgtenure::membership",
                        "process {} cannot heartbeat yet ({e}); retrying in {backoff:?}",
                        self.process_id
                    );
                    self.hooks.error(&e);
                    select! {
                        recv(shutdown) -> _ => return Err(e),
                        recv(after(backoff)) -> _ => {}
                    }
                    backoff = (backoff * 2).min(max_backoff);
                }
            }
        }
        let start = Instant::now();
        let mut next_beat = start + self.config.heartbeat_interval;
        let mut next_tick = start;
        let mut next_sweep = start + self.config.sweep_interval;
        loop {
            let next = next_beat.min(next_tick).min(next_sweep);
            select! {
                recv(shutdown) -> _ => return Ok(()),
                recv(at(next)) -> _ => {}
            }
            let now = Instant::now();
            if now >= next_beat {
                if let Err(e) = self.heartbeat() {
                    self.report("heartbeat failed", &e);
                }
                next_beat = now + self.config.heartbeat_interval;
                if self.local.lock().reread {
                    next_tick = now;
                }
            }
            if now >= next_tick {
                if let Err(e) = self.tick() {
                    self.report("rebalance failed", &e);
                }
                next_tick = Instant::now() + self.config.rebalance_interval;
            }
            if now >= next_sweep {
                if let Err(e) = self.sweep() {
                    self.report("sweep failed", &e);
                }
                next_sweep = now + self.config.sweep_interval;
            }
        }
    }

    /// Logs a loop error (at `error` when waiting cannot fix it) and tells the hooks.
    fn report(&self, what: &str, e: &Error) {
        if permanent(e) {
            log::error!(target: "pgtenure::membership", "process {}: {what}: {e}", self.process_id);
        } else {
            log::warn!(target: "pgtenure::membership", "process {}: {what}: {e}", self.process_id);
        }
        self.hooks.error(e);
    }
}

/// Whether waiting cannot fix `e`: a missing table or privilege, refused credentials, bad input.
fn permanent(e: &Error) -> bool {
    !matches!(e.kind(), ErrorKind::Connection | ErrorKind::Serialization)
}
