//! A started scheduler: a timer thread that hands due ticks to a bounded pool of workers, one tick
//! to a free worker at a time.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{after, at, bounded, select, Receiver, Sender};

use super::job_state::Reservation;
use super::Scheduler;
use crate::error::{Error, Result};
use crate::observe;

/// How long the timer waits before trying again when the database clock cannot be read.
const RETRY_CLOCK: Duration = Duration::from_secs(1);

/// How long `stop` gives workers whose runs have returned to release their ticks and end.
const SETTLE: Duration = Duration::from_millis(250);

/// The longest the timer sleeps without looking at the clocks again.
const LONGEST_SLEEP: Duration = Duration::from_secs(60);

/// A started [`Scheduler`] ([`Scheduler::start`]); dropping it stops it as
/// [`Scheduling::stop`] does.
pub struct Scheduling {
    scheduler: Arc<Scheduler>,
    stop: Option<Sender<()>>,
    timer: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    /// Wakes whoever waits for a worker to come free (the timer, then `stop`).
    freed: Receiver<()>,
}

/// The ticks in hand: what the timer, the workers and the handle share.
struct TicksInHand {
    /// Ticks handed to workers and not yet done with.
    in_hand: AtomicUsize,
}

/// A tick handed to a worker, with its job reserved.
type Work = (Reservation, SystemTime);

impl Scheduler {
    /// Starts the scheduler: a timer thread (`pgtenure-schedule`) that wakes when the next tick is
    /// due by the database clock (it waits on a timer, never spins), and a pool of workers
    /// (`pgtenure-schedule-run`, [`Scheduler::with_workers`]) that claim the due ticks and run the
    /// ones won.
    ///
    /// A due tick is handed over only when a worker is free to run it at once and this scheduler is
    /// not already running the job; nothing queues up. A tick reached later than the job's grace
    /// (the workers were busy, the database was down) is a misfire under the job's [`Misfire`]
    /// rule. A claim is sent only for a tick due by the database clock, and the claim statement
    /// checks it again (`tick <= now()`), so a host clock that steps forward cannot claim a tick
    /// early.
    ///
    /// It first reads the claims table once: an error that waiting cannot fix (the table is
    /// missing, the role lacks a privilege) is returned here, before any thread starts; a
    /// transient one (the database is unreachable) is logged, and the timer keeps trying.
    ///
    /// A service stops it on SIGTERM or SIGINT (no tick claimed from then on, the runs in progress
    /// finish) by waiting for the signal on its main thread (with a signal crate such as
    /// `signal-hook`: no `unsafe`, no `sigwait`), then stopping:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    ///
    /// use pgtenure::schedule::{Schedule, Scheduler};
    /// use signal_hook::consts::{SIGINT, SIGTERM};
    /// use signal_hook::iterator::Signals;
    ///
    /// // Before the scheduler starts: the signals are caught from here on.
    /// let mut signals = Signals::new([SIGTERM, SIGINT])?;
    /// let db = pgtenure::Db::from_env()?;
    /// let scheduling = Scheduler::new(&db)
    ///     .job("report", Schedule::every(Duration::from_secs(60))?, |_run| Ok(()))?
    ///     .start()?;
    /// signals.forever().next(); // until SIGTERM or SIGINT
    /// scheduling.stop()?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// [`Misfire`]: super::Misfire
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when no job was added;
    /// [`ErrorKind::Setup`](crate::error::ErrorKind::Setup) when a thread cannot be started; a
    /// [permanent](crate::Error::is_permanent) database error of the first read.
    pub fn start(self) -> Result<Scheduling> {
        if self.jobs.is_empty() {
            return Err(Error::invalid_input(
                "a scheduler with no jobs has nothing to run",
            ));
        }
        match self.claims.jobs() {
            Err(e) if e.is_permanent() => return Err(e),
            Err(e) => {
                log::warn!(target: "pgtenure::schedule", "starting while the claims table cannot be read ({e}); the scheduler keeps trying");
            }
            Ok(_) => {}
        }
        let scheduler = Arc::new(self);
        let shared = Arc::new(TicksInHand {
            in_hand: AtomicUsize::new(0),
        });
        // One slot per worker: the timer hands a tick over only when a worker is free, so neither
        // channel ever blocks its sender.
        let (work, queue) = bounded::<Work>(scheduler.workers);
        let (free, freed) = bounded::<()>(scheduler.workers);
        for job in &scheduler.jobs {
            job.wake_on_free(free.clone());
        }
        let mut handle = Scheduling {
            scheduler: Arc::clone(&scheduler),

            stop: None,
            timer: None,
            workers: Vec::new(),
            freed: freed.clone(),
        };
        for _ in 0..scheduler.workers {
            let (scheduler, shared, queue) =
                (Arc::clone(&scheduler), Arc::clone(&shared), queue.clone());
            let worker = std::thread::Builder::new()
                .name("pgtenure-schedule-run".into())
                .spawn(move || scheduler.work(&shared, &queue))
                .map_err(|e| Error::setup("could not start a scheduler worker").with_source(e))?;
            handle.workers.push(worker);
        }
        let (stop, stopped) = bounded::<()>(0);
        let timer = {
            let (scheduler, shared) = (Arc::clone(&scheduler), Arc::clone(&shared));
            std::thread::Builder::new()
                .name("pgtenure-schedule".into())
                .spawn(move || scheduler.time(&shared, &stopped, &work, &freed))
                .map_err(|e| Error::setup("could not start the scheduler's timer").with_source(e))?
        };
        handle.stop = Some(stop);
        handle.timer = Some(timer);
        Ok(handle)
    }

    /// The timer: hands due ticks to free workers, then sleeps until the next tick is due or a
    /// worker comes free.
    fn time(
        &self,
        shared: &TicksInHand,
        stopped: &Receiver<()>,
        work: &Sender<Work>,
        freed: &Receiver<()>,
    ) {
        loop {
            let wait = match catch_unwind(AssertUnwindSafe(|| self.hand_over(shared, work))) {
                Ok(Ok(wait)) => wait,
                Ok(Err(e)) => {
                    log::warn!(target: "pgtenure::schedule", "cannot read the database clock: {e}");
                    RETRY_CLOCK
                }
                Err(panic) => {
                    self.caught("the scheduler's timer", &*panic);
                    RETRY_CLOCK
                }
            };
            select! {
                recv(stopped) -> _ => return,
                recv(freed) -> _ => {}
                recv(after(wait)) -> _ => {}
            }
        }
    }

    /// Hands every due job whose tick a worker can take now to the workers; returns how long to
    /// sleep before the next job is due (a worker coming free wakes the timer sooner).
    fn hand_over(&self, shared: &TicksInHand, work: &Sender<Work>) -> Result<Duration> {
        let now = self.db_now()?;
        let mut wait = LONGEST_SLEEP;
        for job in &self.jobs {
            let Some(due) = job.next_due() else {
                continue;
            };
            if let Ok(until) = due.duration_since(now) {
                if !until.is_zero() {
                    wait = wait.min(until);
                    continue;
                }
            }
            if self.stopping.load(Ordering::SeqCst)
                || shared.in_hand.load(Ordering::Acquire) >= self.workers
            {
                // No worker free: the next one freed wakes the timer.
                continue;
            }
            let Some(reserved) = job.reserve() else {
                // Claimed or run here still (by a worker or `run_pending`): its end wakes the
                // timer.
                continue;
            };
            let look = job.look(now);
            if let Some(missed) = look.missed {
                observe::job_missed(&job.job.id);
                self.hooks.missed(&job.job.id, missed);
            }
            if let Some(tick) = look.run {
                shared.in_hand.fetch_add(1, Ordering::AcqRel);
                if work.try_send((reserved, tick)).is_err() {
                    shared.in_hand.fetch_sub(1, Ordering::AcqRel);
                }
            }
            if let Some(due) = job.next_due() {
                wait = wait.min(due.duration_since(now).unwrap_or_default());
            }
        }
        Ok(wait)
    }

    /// A worker: claims each tick handed over and runs it if won; a failed claim puts the tick
    /// back for a look a second later.
    fn work(&self, shared: &TicksInHand, queue: &Receiver<Work>) {
        for (reserved, tick) in queue {
            let job = Arc::clone(reserved.job());
            if !self.stopping.load(Ordering::SeqCst) {
                let attempt = catch_unwind(AssertUnwindSafe(|| {
                    if let Err(e) = self.attempt(&job, tick) {
                        job.retry(tick, self.later(super::RETRY_CLAIM));
                        if e.is_permanent() {
                            log::error!(target: "pgtenure::schedule", "job {:?}: could not claim tick {tick:?}: {e}", job.job.id);
                        } else {
                            log::warn!(target: "pgtenure::schedule", "job {:?}: could not claim tick {tick:?}: {e}", job.job.id);
                        }
                        self.hooks.error(&job.job.id, tick, &e);
                    }
                }));
                if let Err(panic) = attempt {
                    self.caught("a scheduler worker", &*panic);
                }
            }
            // The worker is free before the job: freeing the job wakes the timer, which then finds
            // both free.
            shared.in_hand.fetch_sub(1, Ordering::AcqRel);
            drop(reserved);
        }
    }

    /// Reports a panic caught in a scheduler thread (not a run's: those go to `failed`).
    fn caught(&self, thread: &str, panic: &(dyn std::any::Any + Send)) {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        let error = Error::new(
            crate::error::ErrorKind::Setup,
            format!(
                "{thread} caught a panic ({what}); it goes on, but this is a bug: please report it"
            ),
        );
        log::error!(target: "pgtenure::schedule", "{error}");
        let _ = catch_unwind(AssertUnwindSafe(|| self.hooks.panicked(&error)));
    }
}

impl Scheduling {
    /// Stops, within [`Scheduler::with_stop_timeout`] (30 s by default): no tick is claimed once
    /// it is called, and a tick whose claim was already on its way is released, not run. It waits
    /// for the runs in progress and for the timer (a clock read or a `missed` hook under way), at
    /// most the stop timeout in all, then joins every thread that has ended. A worker still
    /// waiting for a claim's answer is not waited for (so dropping many schedulers during an
    /// outage takes no longer than dropping one): it ends when the answer comes or the
    /// connection's timeouts end it, running nothing. Runs still going at the stop timeout are left
    /// to finish on their own threads, and named in the error; make runs honour
    /// [`Run::deadline`](super::Run::deadline).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::error::ErrorKind::Setup) when a thread panicked, or runs were still
    /// going at the stop timeout (the error names their jobs).
    pub fn stop(mut self) -> Result<()> {
        self.shut_down()
    }

    /// The scheduler, for [`Scheduler::run_pending`]-style checks from tests.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Whether the scheduler's timer thread has ended on its own (it does not: a job's or a hook's
    /// panic is caught and reported; only a panic of the scheduler's own code ends it). No tick is
    /// claimed after that, and [`Scheduling::stop`] returns the error.
    pub fn is_finished(&self) -> bool {
        self.timer.as_ref().is_none_or(JoinHandle::is_finished)
    }

    fn shut_down(&mut self) -> Result<()> {
        self.scheduler.stopping.store(true, Ordering::SeqCst);
        // The timer owns the work queue's sender: once it has returned, idle workers end.
        drop(self.stop.take());
        let deadline = Instant::now() + self.scheduler.stop_timeout;
        let settled = |this: &Scheduling| {
            this.timer.as_ref().is_none_or(JoinHandle::is_finished)
                && this.scheduler.runs.load(Ordering::SeqCst) == 0
        };
        while !settled(self) && Instant::now() < deadline {
            select! {
                recv(self.freed) -> _ => {}
                recv(at(deadline)) -> _ => {}
                recv(after(Duration::from_millis(20))) -> _ => {}
            }
        }
        // Workers end once the timer has and their runs' releases and hooks are done: give them a
        // moment (not a claim or a release waiting for an unanswering database).
        let settle_by = (Instant::now() + SETTLE).min(deadline.max(Instant::now()));
        while self.workers.iter().any(|w| !w.is_finished())
            && self.timer.as_ref().is_none_or(JoinHandle::is_finished)
            && Instant::now() < settle_by
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut panicked = false;
        let mut left = 0;
        for thread in self.timer.take().into_iter().chain(self.workers.drain(..)) {
            if thread.is_finished() {
                panicked |= thread.join().is_err();
            } else {
                left += 1;
            }
        }
        let running: Vec<&str> = self
            .scheduler
            .jobs
            .iter()
            .filter(|job| job.is_reserved())
            .map(|job| &*job.job.id)
            .collect();
        if self.scheduler.runs.load(Ordering::SeqCst) > 0 {
            return Err(Error::setup(format!(
                "stopped the scheduler with runs still going after {:?}: jobs {running:?} (they \
                 finish on their own; make runs honour Run::deadline, or raise the stop timeout)",
                self.scheduler.stop_timeout
            )));
        }
        if left > 0 {
            log::warn!(target: "pgtenure::schedule", "stopped the scheduler; {left} of its threads still wait for the database (claims of {running:?}, or a clock read) and end on their own, running nothing");
        }
        if panicked {
            return Err(Error::setup("a scheduler thread panicked"));
        }
        Ok(())
    }
}

impl Drop for Scheduling {
    fn drop(&mut self) {
        if self.timer.is_none() && self.workers.is_empty() {
            return;
        }
        if let Err(e) = self.shut_down() {
            log::warn!(target: "pgtenure::schedule", "stopping the scheduler on drop: {e}");
        }
    }
}

impl fmt::Debug for Scheduling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduling")
            .field("scheduler", &self.scheduler)
            .finish()
    }
}
