//! The membership loop and its liveness watcher.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, at, bounded, never, select, Receiver, RecvTimeoutError, Sender};

use super::leaser::Leaser;
use crate::error::{Error, ErrorKind, Result};

/// First and longest wait between heartbeats while `run` waits for the database at startup.
const STARTUP_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// What `stop` allows, beyond waiting for connections, for the statements of the loop's step in
/// progress.
const STOP_GRACE: Duration = Duration::from_secs(2);

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
    /// but [`Connection`](crate::ErrorKind::Connection), [`Timeout`](crate::ErrorKind::Timeout) and
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
    /// [`Leaser::delete_process`]. On SIGTERM or SIGINT, with a signal crate such as `signal-hook`
    /// (no `unsafe`, no `sigwait`): the signal thread sends the shutdown; or use [`Leaser::spawn`]
    /// and [`Running::stop`].
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss};
    /// # struct Work;
    /// # impl Reconciler for Work {
    /// #     fn units_gained(&self, _: &[Unit]) {}
    /// #     fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use signal_hook::consts::{SIGINT, SIGTERM};
    /// use signal_hook::iterator::Signals;
    ///
    /// let db = pgtenure::Db::from_env()?;
    /// let leaser = Leaser::new(&db, Arc::new(Work), Default::default())?;
    /// let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(1);
    /// let mut signals = Signals::new([SIGTERM, SIGINT])?;
    /// std::thread::spawn(move || {
    ///     if signals.forever().next().is_some() {
    ///         let _ = stop.send(());
    ///     }
    /// });
    /// leaser.run(&shutdown)?; // returns once the signal came
    /// leaser.release()?;
    /// leaser.delete_process()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// One `run` at a time: a second, while one runs, is refused (two loops would each watch the
    /// liveness deadline with their own watcher, and stopping one would blind the other).
    /// [`Leaser::spawn`] runs it on a thread it owns.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) at once when this leaser's
    /// `run` is already running; [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the watcher
    /// thread cannot be started; a permanent error at startup (see above); the last heartbeat error
    /// when the signal came before any heartbeat succeeded (a loop that failed all along never
    /// returns `Ok`).
    pub fn run(&self, shutdown: &Receiver<()>) -> Result<()> {
        self.claim_loop()?;
        let _ran = Ran(self);
        self.run_claimed(shutdown)
    }

    /// The loop, once [`Leaser::claim_loop`] succeeded.
    fn run_claimed(&self, shutdown: &Receiver<()>) -> Result<()> {
        let (wake, woken) = bounded::<()>(1);
        self.watch_deadline(Some(wake));
        std::thread::scope(|scope| {
            // Disconnecting the wake channel stops the watcher, which the scope joins: also when
            // the loop unwinds (a reconciler or a hook panicked), or the join would wait forever.
            struct StopWatcher<'a>(&'a Leaser);
            impl Drop for StopWatcher<'_> {
                fn drop(&mut self) {
                    self.0.watch_deadline(None);
                }
            }
            let _stop_watcher = StopWatcher(self);
            let watcher = std::thread::Builder::new()
                .name("pgtenure-member".into())
                .spawn_scoped(scope, || self.watch_liveness(&woken))
                .map_err(|e| {
                    Error::setup("could not start the membership liveness watcher").with_source(e)
                });
            watcher.and_then(|_| self.run_loop(shutdown))
        })
    }

    /// Runs [`Leaser::run`] on a thread of its own (`pgtenure-membership`) and returns the handle
    /// that owns it: [`Running::stop`] ends the loop, gives the units back ([`Leaser::release`]),
    /// deletes the process row ([`Leaser::delete_process`]) and joins the thread.
    /// [`Running::leaser`] reaches the leaser ([`Leaser::owned`], [`Leaser::fence`]) and shares it
    /// with other threads.
    ///
    /// A service stops it on SIGTERM or SIGINT by waiting for the signal on its main thread (with a
    /// signal crate such as `signal-hook`: no `unsafe`, no `sigwait`), then stopping:
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss};
    /// # struct Work;
    /// # impl Reconciler for Work {
    /// #     fn units_gained(&self, _: &[Unit]) {}
    /// #     fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
    /// # }
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use signal_hook::consts::{SIGINT, SIGTERM};
    /// use signal_hook::iterator::Signals;
    ///
    /// // Before the loops start: the signals are caught from here on.
    /// let mut signals = Signals::new([SIGTERM, SIGINT])?;
    /// let db = pgtenure::Db::from_env()?;
    /// let membership = Leaser::new(&db, Arc::new(Work), Default::default())?.spawn()?;
    /// signals.forever().next(); // until SIGTERM or SIGINT
    /// membership.stop()?; // the units handed back, the process row deleted
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the thread cannot be started.
    pub fn spawn(self) -> Result<Running> {
        Arc::new(self).spawn_shared()
    }

    /// Like [`Leaser::spawn`] for a leaser that other parts of the application already share.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the thread cannot be started;
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when this leaser's loop runs
    /// already: nothing is started (and no handle is made whose stop would release the running
    /// loop's units).
    pub fn spawn_shared(self: Arc<Self>) -> Result<Running> {
        // Claimed here, before the thread exists: a refused spawn returns no handle whose stop
        // would release the running loop's units.
        self.claim_loop()?;
        let (stop, shutdown) = bounded::<()>(0);
        let (done, finished) = bounded::<()>(0);
        let leaser = Arc::clone(&self);
        let thread = std::thread::Builder::new()
            .name("pgtenure-membership".into())
            .spawn(move || {
                // Dropped when the thread ends, also on unwinding: `stop` waits for that.
                let _done = done;
                let _ran = Ran(&leaser);
                leaser.run_claimed(&shutdown)
            })
            .map_err(|e| {
                self.loop_ended();
                Error::setup("could not start the membership thread").with_source(e)
            })?;
        Ok(Running {
            leaser: self,
            stop: Some(stop),
            thread: Some(thread),
            finished,
        })
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
            let beat = {
                let _busy = self.busy().enter();
                self.heartbeat()
            };
            match beat {
                Ok(()) => break,
                Err(e) if e.is_permanent() => {
                    log::error!(
                        target: "pgtenure::membership",
                        "process {} cannot start: {e}",
                        self.process_id()
                    );
                    self.hooks().error(&e);
                    return Err(e);
                }
                Err(e) => {
                    self.unreached(&e);
                    log::warn!(
                        target: "pgtenure::membership",
                        "process {} cannot heartbeat yet ({e}); retrying in {backoff:?}",
                        self.process_id()
                    );
                    self.hooks().error(&e);
                    select! {
                        recv(shutdown) -> _ => return Err(e),
                        recv(after(backoff)) -> _ => {}
                    }
                    backoff = (backoff * 2).min(max_backoff);
                }
            }
        }
        let start = Instant::now();
        let mut next_beat = start + self.config().heartbeat_interval;
        let mut next_tick = start;
        let mut next_sweep = start + self.config().sweep_interval;
        loop {
            let next = next_beat.min(next_tick).min(next_sweep);
            select! {
                recv(shutdown) -> _ => return Ok(()),
                recv(at(next)) -> _ => {}
            }
            let now = Instant::now();
            let _busy = self.busy().enter();
            if now >= next_beat {
                let was_settled = self.local().settled();
                match self.beat() {
                    // Its lapse, not its duration: a beat that found a lapse delivers the losses.
                    Ok(lapsed) => self.reached(None, lapsed),
                    Err(e) => {
                        self.unreached(&e);
                        self.report("heartbeat failed", &e);
                    }
                }
                next_beat = now + self.config().heartbeat_interval;
                let local = self.local();
                // A re-read, or this process now counts in the fair share: tick at once.
                if local.must_reread() || (local.settled() && !was_settled) {
                    next_tick = now;
                }
            }
            if now >= next_tick {
                match self.tick() {
                    // Not its duration, which counts the reconciler's: the tick judges its read.
                    Ok(_) => self.reached(None, false),
                    Err(e) => {
                        self.unreached(&e);
                        self.report("rebalance failed", &e);
                    }
                }
                next_tick = Instant::now() + self.config().rebalance_interval;
            }
            if now >= next_sweep {
                next_sweep = self.sweep_unless_deferred(now);
            }
        }
    }

    /// Sweeps, unless back from an outage (see [`Leaser::defers`]): the processes that look dead
    /// may only be late to return. Returns when to sweep next.
    fn sweep_unless_deferred(&self, now: Instant) -> Instant {
        if let Some(until) = self.defers() {
            return until.max(now + self.config().heartbeat_interval);
        }
        match self.sweep_until(Some(Instant::now() + self.config().heartbeat_interval)) {
            Ok(_) => self.reached(None, false),
            Err(e) => {
                self.unreached(&e);
                self.report("sweep failed", &e);
            }
        }
        now + self.config().sweep_interval
    }

    /// Logs a loop error (at `error` when waiting cannot fix it) and tells the hooks.
    fn report(&self, what: &str, e: &Error) {
        if e.is_permanent() {
            log::error!(target: "pgtenure::membership", "process {}: {what}: {e}", self.process_id());
        } else {
            log::warn!(target: "pgtenure::membership", "process {}: {what}: {e}", self.process_id());
        }
        self.hooks().error(e);
    }
}

/// Marks the loop stopped when dropped (also on unwinding).
struct Ran<'a>(&'a Leaser);

impl Drop for Ran<'_> {
    fn drop(&mut self) {
        self.0.loop_ended();
    }
}

/// A [`Leaser::run`] loop on a thread of its own ([`Leaser::spawn`]); [`Running::leaser`] reaches
/// the [`Leaser`].
///
/// Stopping ([`Running::stop`], or dropping the handle) ends the loop after the database call in
/// progress, tells the reconciler every unit is lost ([`UnitLoss::Released`](super::UnitLoss)),
/// gives the units back and deletes the process row, so the others take the units over at their
/// next tick, and joins the thread.
///
/// Bounded: it waits for the loop's thread at most twice the pool's connection timeout (10 s by
/// default) plus 2 s, counted from the start of the loop's database call in progress if there is
/// one (so stopping or dropping many handles whose loops hang on one outage takes one bound, not
/// one each), then for the release and the delete, each at most the pool's connection
/// timeout for a connection plus one statement, whose duration the TCP timeouts bound when the
/// network is dead (see [`Db`](crate::Db)). A loop not done by then (a statement stuck on a
/// database that does not answer) is left to end on its own, and `stop` returns an
/// [`ErrorKind::Connection`](crate::ErrorKind::Connection) error without releasing: the loop
/// starts nothing more once its statement returns, the reconciler still hears every unit lost at
/// the local liveness deadline, and the units become claimable when the process row expires. A
/// statement waiting for a row lock is not bounded by the TCP timeouts: end this process's fenced
/// transactions ([`Leaser::fence`]) before stopping, or the release waits for them.
pub struct Running {
    leaser: Arc<Leaser>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Result<()>>>,
    /// Disconnects when the thread ends (the bounded join).
    finished: Receiver<()>,
}

impl Running {
    /// The leaser, to share with other threads (the reconciler's workers, to fence their writes).
    pub fn leaser(&self) -> &Arc<Leaser> {
        &self.leaser
    }

    /// Whether the loop has ended on its own (a permanent error at startup); [`Running::stop`]
    /// then returns that error.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops the loop and hands everything over (see [`Running`]); returns the first error of the
    /// loop, the release and the delete.
    ///
    /// # Errors
    ///
    /// The loop's own error (as [`Leaser::run`] returns it), else that of [`Leaser::release`] or
    /// [`Leaser::delete_process`]; the units then become claimable when the row expires.
    pub fn stop(mut self) -> Result<()> {
        self.shut_down()
    }

    /// How long `stop` waits for the loop's thread.
    fn stop_bound(&self) -> Duration {
        self.leaser
            .db()
            .pool_timeout()
            .saturating_mul(2)
            .saturating_add(STOP_GRACE)
    }

    fn shut_down(&mut self) -> Result<()> {
        drop(self.stop.take());
        let ran = match self.thread.take() {
            Some(thread) => {
                let bound = self.stop_bound();
                // Counted from the start of the loop's call in progress: dropping many handles
                // whose loops hang on one outage takes one bound, not one each.
                match self.finished.recv_timeout(self.leaser.busy().wait(bound)) {
                    Err(RecvTimeoutError::Disconnected) => thread.join().unwrap_or_else(|_| {
                        Err(Error::new(
                            ErrorKind::Setup,
                            "the membership thread panicked (a reconciler or hook panicked?)",
                        ))
                    }),
                    _ => {
                        log::error!(target: "pgtenure::membership", "process {}: the loop did not stop within {bound:?} (a statement stuck on the database); leaving its thread to end on its own, without releasing: the units become claimable when the process row expires", self.leaser.process_id());
                        return Err(Error::new(
                            ErrorKind::Connection,
                            format!(
                                "the membership loop did not stop within {bound:?}: a statement \
                                 is stuck on the database; its units become claimable when the \
                                 process row expires"
                            ),
                        ));
                    }
                }
            }
            None => Ok(()),
        };
        let released = self.leaser.release().map(drop);
        let deleted = self.leaser.delete_process();
        ran.and(released).and(deleted)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        if let Err(e) = self.shut_down() {
            log::warn!(
                target: "pgtenure::membership",
                "process {}: stopping on drop: {e}",
                self.leaser.process_id()
            );
        }
    }
}

impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Running")
            .field("process_id", &self.leaser.process_id())
            .field("finished", &self.is_finished())
            .finish()
    }
}
