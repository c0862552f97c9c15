//! Recurring jobs on tick claims: each tick of a job runs on one instance of the fleet, when it is
//! due by the database clock.
//!
//! Every instance builds the same [`Scheduler`] (the same job ids and schedules) and starts it. At
//! each tick of a job, every instance claims it ([`TickClaims`]); one wins and runs it. What it
//! promises:
//!
//! - **Each tick runs once fleet-wide, never before it is due by the database clock.** The
//!   scheduler learns its host's offset from the database clock (every claim returns it) and
//!   measures it again when the host's clock steps against the monotonic clock (NTP, a resumed VM);
//!   the claim statement itself refuses a tick later than the database's `now()`. So a host whose
//!   clock runs fast or jumps neither runs ticks early nor locks the others out, and a slow one is
//!   not starved.
//! - **Never two runs of one job at once.** One scheduler never starts a job while its own previous
//!   run of it goes on, whatever the busy period says; and a run keeps the job busy fleet-wide while
//!   it goes on: a thread per run (`pgtenure-schedule-busy`) extends the claim's busy period every
//!   third of it ([`TickClaim::extend`](crate::tick_claims::TickClaim::extend)). If this instance crashes, pauses
//!   or loses the database, the job is free one busy period after the last extension; a run must
//!   then stop by [`Run::deadline`], and [`Run::fence`] refuses its writes after it.
//! - **Nothing queues up.** A due tick is claimed only when a worker is free to run it at once. A
//!   tick reached later than the job's grace (workers busy, the process paused, the database down)
//!   is a misfire, reported to [`ScheduleHooks::missed`]: skipped by default, or under
//!   [`Misfire::RunOnce`] the latest missed tick runs once, then the current one. A tick whose claim
//!   failed is looked at again a second later under the same rule.
//! - A run gets a [`Run`]: its job id, tick, fencing token and deadline, and [`Run::fence`] for its
//!   writes ([`Run::fence_statement`] for another driver's: [`crate::fence`]).
//! - A job that returns an error or panics is logged and reported to the [`ScheduleHooks`]; the
//!   scheduler goes on. A panic in the scheduler's own threads (or in a hook) is caught, logged and
//!   reported to [`ScheduleHooks::panicked`].
//! - [`Scheduling::stop`] claims nothing once called and waits for runs in progress up to
//!   [`Scheduler::with_stop_timeout`].
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::Duration;
//! use pgtenure::schedule::{Schedule, Scheduler};
//! use pgtenure::Db;
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let scheduler = Scheduler::new(&db)
//!     .job("rollup", Schedule::every(Duration::from_secs(60))?, |run| {
//!         println!("rolling up tick {:?} (token {})", run.tick(), run.token());
//!         Ok(())
//!     })?
//!     .start()?;
//! // ... at shutdown:
//! scheduler.stop()?;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "cron")]
mod cron;
mod hooks;
mod job;
mod job_state;
mod run;
mod running;
mod ticks;
mod won_tick;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

pub use self::hooks::{NoScheduleHooks, ScheduleHooks};
pub use self::job::{Job, Misfire, RunResult};
pub use self::run::Run;
pub use self::running::Scheduling;
pub use self::ticks::Schedule;

use self::job_state::JobState;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::input::{micros, MIN_DURATION};
use crate::observe;
use crate::tick_claims::{Claimed, TickClaims};

/// The local clock a scheduler reads, replaceable for tests of hosts whose clocks are off.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// How far the local clock may move away from the monotonic clock between two measures of the
/// database clock before the scheduler takes it for a step (NTP, a resumed VM, an operator's
/// `date`) and measures again. NTP's slewing moves it by at most 0.5 ms a second.
const CLOCK_STEP: Duration = Duration::from_millis(100);

/// How long a tick whose claim failed waits before it is looked at again.
const RETRY_CLAIM: Duration = Duration::from_secs(1);

/// The most workers a scheduler may have.
const MAX_WORKERS: usize = 1024;

/// Runs recurring jobs on tick claims; see the [module docs](self).
pub struct Scheduler {
    claims: TickClaims,
    jobs: Vec<Arc<JobState>>,
    clock: Clock,
    hooks: Arc<dyn ScheduleHooks>,
    workers: usize,
    stop_timeout: Duration,
    /// The database clock as last measured against the local clocks.
    estimate: Mutex<Option<Estimate>>,
    /// Set by [`Scheduling::stop`]: a tick won from then on is released, not run.
    stopping: AtomicBool,
    /// Runs in progress (a won tick's function, its hooks and its release).
    runs: AtomicUsize,
}

/// The database clock minus the local one, and when (by both local clocks) it was measured.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    offset_us: i128,
    local: SystemTime,
    monotonic: Instant,
}

impl Estimate {
    /// Whether the local clock moved by more than [`CLOCK_STEP`] against the monotonic clock since
    /// this estimate was made: it stepped, and the offset is stale.
    fn stepped(&self, local: SystemTime, monotonic: Instant) -> bool {
        let by_local = micros_since_epoch(local) - micros_since_epoch(self.local);
        let by_monotonic = monotonic
            .saturating_duration_since(self.monotonic)
            .as_micros() as i128;
        (by_local - by_monotonic).unsigned_abs() > CLOCK_STEP.as_micros()
    }
}

/// What an attempt at a tick came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ran,
    Refused,
    NotYetDue,
    Missed,
    /// Won as the scheduler was stopping: released, not run.
    Stopping,
}

impl Scheduler {
    /// A scheduler on the tick claims table `pgtenure_tick_claims`, with no jobs, two workers and
    /// the system clock.
    pub fn new(db: &Db) -> Scheduler {
        Scheduler {
            claims: TickClaims::new(db),
            jobs: Vec::new(),
            clock: Arc::new(SystemTime::now),
            hooks: Arc::new(NoScheduleHooks),
            workers: 2,
            stop_timeout: Duration::from_secs(30),
            estimate: Mutex::new(None),
            stopping: AtomicBool::new(false),
            runs: AtomicUsize::new(0),
        }
    }

    /// Uses another tick claims table. Defaults to `pgtenure_tick_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(mut self, table: &str) -> Result<Scheduler> {
        self.claims = self.claims.with_table(table)?;
        Ok(self)
    }

    /// Names this instance in the claims it wins. Defaults to `"{hostname}-{pid}-{random hex}"`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a blank or over-long owner.
    pub fn with_owner(mut self, owner: &str) -> Result<Scheduler> {
        self.claims = self.claims.with_owner(owner)?;
        Ok(self)
    }

    /// How many runs may go on at once (threads of the started scheduler). A tick is claimed only
    /// when one of them is free to run it. Defaults to 2.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is zero or over 1,024.
    pub fn with_workers(mut self, workers: usize) -> Result<Scheduler> {
        if workers == 0 || workers > MAX_WORKERS {
            return Err(Error::invalid_input(format!(
                "a scheduler has 1 to {MAX_WORKERS} workers, not {workers}"
            )));
        }
        self.workers = workers;
        Ok(self)
    }

    /// How long [`Scheduling::stop`] waits for the runs in progress to end before it returns
    /// without them. Defaults to 30 s.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years.
    pub fn with_stop_timeout(mut self, timeout: Duration) -> Result<Scheduler> {
        micros("stop timeout", timeout, MIN_DURATION)?;
        self.stop_timeout = timeout;
        Ok(self)
    }

    /// Observes runs ([`ScheduleHooks`]). Defaults to [`NoScheduleHooks`].
    pub fn with_hooks(mut self, hooks: Arc<dyn ScheduleHooks>) -> Scheduler {
        self.hooks = hooks;
        self
    }

    /// Reads the local time from `clock` instead of the system clock: for tests of a host whose
    /// clock is off or steps (the database's stays real). Defaults to [`SystemTime::now`].
    pub fn with_clock(mut self, clock: Clock) -> Scheduler {
        self.clock = clock;
        self
    }

    /// Adds a job: `run` is called for every tick of `schedule` this instance wins, with the
    /// job's defaults ([`Job`] for the others).
    ///
    /// # Errors
    ///
    /// As [`Scheduler::with_job`].
    pub fn job(
        self,
        id: &str,
        schedule: Schedule,
        run: impl Fn(&Run) -> RunResult + Send + Sync + 'static,
    ) -> Result<Scheduler> {
        self.with_job(Job::new(id, schedule, run)?)
    }

    /// Adds a job built with its options.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a job with the same id is
    /// there already.
    pub fn with_job(mut self, job: Job) -> Result<Scheduler> {
        if self.jobs.iter().any(|j| j.job.id == job.id) {
            return Err(Error::invalid_input(format!(
                "job {:?} is scheduled twice",
                job.id
            )));
        }
        self.jobs.push(Arc::new(JobState::new(job)));
        Ok(self)
    }

    /// One step, on the calling thread (for tests, and for callers with a loop of their own):
    /// claims every job's tick that is due by the database clock and runs the ticks won, one after
    /// the other. Returns how many ran. A job that a started scheduler is running is left alone.
    ///
    /// The step reads the database clock itself (one round trip more than a started scheduler's
    /// timer, which goes by its estimate of this host's offset): so which tick is due never depends
    /// on how well a loaded machine measured that offset, and a step made within one database
    /// second runs that second's tick. A tick won later than its grace (the claim reached the
    /// database in the next period) is a misfire, and the tick due by then is looked at in the
    /// same step.
    ///
    /// # Errors
    ///
    /// A database or connection error reading the clock or claiming (the tick is then looked at
    /// again at the next step, under the job's [`Misfire`] rule); runs' own errors go to the hooks.
    pub fn run_pending(&self) -> Result<usize> {
        let (now, _) = self.measure()?;
        let mut ran = 0;
        for job in &self.jobs {
            let Some(_reserved) = job.reserve() else {
                continue;
            };
            let mut now = now;
            // The tick due now, and once more if that one was won too late: the next one is due.
            for _ in 0..2 {
                let due = job.look(now);
                if let Some(missed) = due.missed {
                    observe::job_missed(&job.job.id);
                    self.hooks.missed(&job.job.id, missed);
                }
                let Some(tick) = due.run else {
                    break;
                };
                match self.attempt(job, tick) {
                    Ok((Outcome::Missed, db_now)) => now = db_now,
                    Ok((outcome, _)) => {
                        ran += usize::from(outcome == Outcome::Ran);
                        break;
                    }
                    Err(e) => {
                        job.retry(tick, self.later(RETRY_CLAIM));
                        return Err(e);
                    }
                }
            }
        }
        Ok(ran)
    }

    /// The database clock, read now (one round trip), and the host's offset learned from it.
    fn measure(&self) -> Result<(SystemTime, Estimate)> {
        let sent = (self.clock)();
        let db_now = self.claims.db_now()?;
        Ok((db_now, self.learn(sent, db_now)))
    }

    /// The database clock by this host's clock and the last measured offset; measured again when
    /// it never was or the host's clock stepped since.
    fn db_now(&self) -> Result<SystemTime> {
        let (local, monotonic) = ((self.clock)(), Instant::now());
        let known = *self.estimate.lock();
        if let Some(estimate) = known {
            if !estimate.stepped(local, monotonic) {
                return Ok(shift(local, estimate.offset_us));
            }
            log::info!(target: "pgtenure::schedule", "this host's clock stepped; measuring the database clock again");
        }
        let (_, estimate) = self.measure()?;
        Ok(shift((self.clock)(), estimate.offset_us))
    }

    /// The database clock `by` from now, as last measured, without a round trip (the tick itself
    /// when nothing was measured yet: looked at again at once).
    fn later(&self, by: Duration) -> SystemTime {
        let estimate = *self.estimate.lock();
        estimate
            .map_or(UNIX_EPOCH, |e| shift((self.clock)(), e.offset_us))
            .checked_add(by)
            .unwrap_or(UNIX_EPOCH)
    }

    /// Records the offset from a database time read between `sent` and now (local).
    fn learn(&self, sent: SystemTime, db_now: SystemTime) -> Estimate {
        let (received, monotonic) = ((self.clock)(), Instant::now());
        let mid = micros_since_epoch(sent) / 2 + micros_since_epoch(received) / 2;
        let estimate = Estimate {
            offset_us: micros_since_epoch(db_now) - mid,
            local: received,
            monotonic,
        };
        *self.estimate.lock() = Some(estimate);
        estimate
    }

    /// Claims `tick` of `job` (reserved by the caller) and runs it if won, unless the claim read a
    /// clock by which it is later than the job allows.
    /// Claims `tick` of `job` and runs it if won in time: what came of it, and the database clock
    /// the claim statement read.
    fn attempt(&self, job: &JobState, tick: SystemTime) -> Result<(Outcome, SystemTime)> {
        let id = &job.job.id;
        let sent = (self.clock)();
        let (claimed, db_now) =
            self.claims
                .claim_reporting(id, tick, job.job.busy_for(tick), Duration::ZERO)?;
        self.learn(sent, db_now);
        match claimed {
            Claimed::Refused => {
                self.hooks.refused(id, tick);
                Ok((Outcome::Refused, db_now))
            }
            Claimed::NotYetDue => {
                // This host's clock ran ahead of its estimate: look again when it is due.
                log::info!(target: "pgtenure::schedule", "job {id:?}: tick {tick:?} is not yet due by the database clock; waiting for it");
                job.retry(tick, tick);
                Ok((Outcome::NotYetDue, db_now))
            }
            Claimed::Won(claim) => {
                let late = db_now.duration_since(tick).unwrap_or_default();
                if late > job.job.allowed_lateness(tick) {
                    log::info!(target: "pgtenure::schedule", "job {id:?}: tick {tick:?} won {late:?} after it was due, later than the job allows: missed");
                    if let Err(e) = claim.release() {
                        log::warn!(target: "pgtenure::schedule", "job {id:?}: could not release its tick: {e}");
                    }
                    observe::job_missed(id);
                    self.hooks.missed(id, tick);
                    return Ok((Outcome::Missed, db_now));
                }
                let running = Counted::new(&self.runs);
                if self.stopping.load(Ordering::SeqCst) {
                    // The claim was on its way when stop() was called: nothing starts after it.
                    log::info!(target: "pgtenure::schedule", "job {id:?}: tick {tick:?} won while the scheduler stopped: released, not run");
                    if let Err(e) = claim.release() {
                        log::warn!(target: "pgtenure::schedule", "job {id:?}: could not release its tick: {e}");
                    }
                    return Ok((Outcome::Stopping, db_now));
                }
                observe::job_started(id, late);
                job.run(claim, &*self.hooks, running);
                Ok((Outcome::Ran, db_now))
            }
        }
    }
}

/// Counts one in `counter` while it lives (also when a panic unwinds past it).
pub(super) struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(counter: &'a AtomicUsize) -> Counted<'a> {
        counter.fetch_add(1, Ordering::SeqCst);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `t` moved by `offset_us` microseconds.
fn shift(t: SystemTime, offset_us: i128) -> SystemTime {
    let by = Duration::from_micros(offset_us.unsigned_abs().min(u128::from(u64::MAX)) as u64);
    if offset_us >= 0 {
        t + by
    } else {
        t.checked_sub(by).unwrap_or(UNIX_EPOCH)
    }
}

fn micros_since_epoch(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i128,
        Err(e) => -(e.duration().as_micros() as i128),
    }
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("claims", &self.claims)
            .field(
                "jobs",
                &self.jobs.iter().map(|j| &*j.job.id).collect::<Vec<_>>(),
            )
            .field("workers", &self.workers)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifting_by_an_offset_goes_both_ways() {
        let t = UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(shift(t, 1_500_000), t + Duration::from_millis(1500));
        assert_eq!(shift(t, -1_500_000), t - Duration::from_millis(1500));
        assert_eq!(micros_since_epoch(t), 100_000_000);
    }
}
