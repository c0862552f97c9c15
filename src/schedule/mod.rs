//! Recurring jobs on tick claims: each tick of a job runs on one instance of the fleet, when it is
//! due by the database clock.
//!
//! Every instance builds the same [`Scheduler`] (the same job ids and schedules) and starts it. At
//! each tick of a job, every instance claims it ([`TickClaims`]); one wins and
//! runs it. A tick is due when the *database's* clock reaches it: the scheduler learns its host's
//! offset from the database clock (every claim returns it), so a host whose clock runs fast neither
//! runs ticks early nor wins them all, and a slow one is not starved.
//!
//! - A run still busy is never started twice: the claim's busy period (by default the job's
//!   interval) refuses later ticks fleet-wide until the run releases it, and one scheduler never
//!   starts a job that it is still running.
//! - Ticks missed while the fleet was down follow the job's [`Misfire`]: skipped by default, or the
//!   latest one run once.
//! - A run gets a [`Run`]: its job id, tick, fencing token and deadline, and [`Run::fence`] for its
//!   writes.
//! - A job that returns an error or panics is logged and reported to the [`ScheduleHooks`]; the
//!   scheduler goes on.
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
mod job;
mod running;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

pub use self::job::{Job, Misfire, NoScheduleHooks, Run, RunResult, Schedule, ScheduleHooks};
pub use self::running::Scheduling;

use self::job::JobState;
use crate::error::{Error, Result};
use crate::tick_claims::TickClaims;
use crate::Db;

/// The local clock a scheduler reads, replaceable for tests of hosts whose clocks are off.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Runs recurring jobs on tick claims; see the [module docs](self).
pub struct Scheduler {
    claims: TickClaims,
    jobs: Vec<Arc<JobState>>,
    clock: Clock,
    hooks: Arc<dyn ScheduleHooks>,
    workers: usize,
    /// The database clock minus the local one, in microseconds, as last measured.
    offset_us: Mutex<Option<i128>>,
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
            offset_us: Mutex::new(None),
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

    /// How many runs may go on at once (threads of the started scheduler). Defaults to 2.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is zero.
    pub fn with_workers(mut self, workers: usize) -> Result<Scheduler> {
        if workers == 0 {
            return Err(Error::invalid_input(
                "a scheduler needs at least one worker",
            ));
        }
        self.workers = workers;
        Ok(self)
    }

    /// Observes runs ([`ScheduleHooks`]). Defaults to [`NoScheduleHooks`].
    pub fn with_hooks(mut self, hooks: Arc<dyn ScheduleHooks>) -> Scheduler {
        self.hooks = hooks;
        self
    }

    /// Reads the local time from `clock` instead of the system clock: for tests of a host whose
    /// clock is off (the database's stays real). Defaults to [`SystemTime::now`].
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
    /// the other. Returns how many ran.
    ///
    /// # Errors
    ///
    /// A database or connection error reading the clock or claiming; runs' own errors go to the
    /// hooks.
    pub fn run_pending(&self) -> Result<usize> {
        let now = self.db_now()?;
        let mut ran = 0;
        for job in &self.jobs {
            if let Some(tick) = job.take_due(now) {
                ran += usize::from(self.run_tick(job, tick)?);
            }
        }
        Ok(ran)
    }

    /// The database clock by this host's clock and the last measured offset; measured first if it
    /// never was.
    fn db_now(&self) -> Result<SystemTime> {
        let known = *self.offset_us.lock();
        let offset = match known {
            Some(offset) => offset,
            None => {
                let sent = (self.clock)();
                let db_now = self.claims.db_now()?;
                self.learn(sent, db_now);
                self.offset_us.lock().unwrap_or_default()
            }
        };
        Ok(shift((self.clock)(), offset))
    }

    /// Records the offset from a database time read between `sent` and now (local).
    fn learn(&self, sent: SystemTime, db_now: SystemTime) {
        let received = (self.clock)();
        let mid = micros_since_epoch(sent) / 2 + micros_since_epoch(received) / 2;
        *self.offset_us.lock() = Some(micros_since_epoch(db_now) - mid);
    }

    /// Claims `tick` of `job` and runs it if won. Returns whether it ran.
    fn run_tick(&self, job: &JobState, tick: SystemTime) -> Result<bool> {
        let Some(_running) = job.start_running() else {
            // Still running the previous tick here: never twice at once.
            self.hooks.refused(&job.job.id, tick);
            return Ok(false);
        };
        let sent = (self.clock)();
        let (claim, db_now) =
            self.claims
                .claim_reporting(&job.job.id, tick, job.job.busy_for(tick))?;
        self.learn(sent, db_now);
        let Some(claim) = claim else {
            self.hooks.refused(&job.job.id, tick);
            return Ok(false);
        };
        // Won early by the database clock (the offset was off): wait until the tick is due.
        if let Ok(early) = tick.duration_since(db_now) {
            std::thread::sleep(early);
        }
        job.run(claim, &*self.hooks);
        Ok(true)
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

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Scheduler>();
        check::<Scheduling>();
    }
}
