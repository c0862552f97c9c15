//! Jobs: their schedule and options, the run a won tick gets, and which tick is due.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::input::{check_key, micros, MIN_DURATION};
use crate::tick_claims::TickClaim;

/// When a job's ticks fall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    period: Duration,
}

impl Schedule {
    /// Every `period`, at whole multiples of it since the Unix epoch (every minute: on the minute),
    /// so every instance computes the same ticks.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `period` is under 1 ms or
    /// over 100 years.
    pub fn every(period: Duration) -> Result<Schedule> {
        micros("schedule period", period, MIN_DURATION)?;
        Ok(Schedule { period })
    }

    /// The time between ticks.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The latest tick at or before `t`.
    pub(crate) fn at_or_before(&self, t: SystemTime) -> SystemTime {
        let since = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
        let period = self.period.as_micros().max(1);
        UNIX_EPOCH + Duration::from_micros((since / period * period) as u64)
    }

    /// The first tick after `t`.
    pub(crate) fn after(&self, t: SystemTime) -> SystemTime {
        self.at_or_before(t) + self.period
    }
}

/// What to do with ticks missed (reached later than the job's grace after they were due: the
/// fleet was down, or this instance was paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Misfire {
    /// Run none of them; go on with the next tick. The default.
    Skip,
    /// Run the latest missed tick once, if it is not older than `within`; skip the others.
    RunOnce {
        /// How old the latest missed tick may be.
        within: Duration,
    },
}

/// What a job's function returns: an error is logged and reported to
/// [`ScheduleHooks::failed`]; the scheduler goes on.
pub type RunResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The function a job runs for each tick won.
type RunFn = dyn Fn(&Run) -> RunResult + Send + Sync;

/// A job and its options, for [`Scheduler::with_job`](super::Scheduler::with_job).
pub struct Job {
    pub(super) id: String,
    pub(super) schedule: Schedule,
    pub(super) run: Box<RunFn>,
    pub(super) misfire: Misfire,
    pub(super) busy: Duration,
    pub(super) grace: Duration,
}

impl Job {
    /// A job that calls `run` for every tick of `schedule` this instance wins; misfires skipped,
    /// busy for its period, a grace of its period or 1 s, whichever is shorter.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a blank, NUL-carrying or
    /// over-long id.
    pub fn new(
        id: &str,
        schedule: Schedule,
        run: impl Fn(&Run) -> RunResult + Send + Sync + 'static,
    ) -> Result<Job> {
        check_key("job id", id)?;
        Ok(Job {
            id: id.to_owned(),
            busy: schedule.period,
            grace: schedule.period.min(Duration::from_secs(1)),
            schedule,
            run: Box::new(run),
            misfire: Misfire::Skip,
        })
    }

    /// What to do with missed ticks. Defaults to [`Misfire::Skip`].
    pub fn with_misfire(mut self, misfire: Misfire) -> Job {
        self.misfire = misfire;
        self
    }

    /// How long a won tick keeps the job busy fleet-wide unless its run ends first (then it is
    /// released): no later tick starts meanwhile. Make it longer than the longest run. Defaults to
    /// the schedule's period.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years.
    pub fn with_busy(mut self, busy: Duration) -> Result<Job> {
        micros("busy period", busy, MIN_DURATION)?;
        self.busy = busy;
        Ok(self)
    }

    /// How late a tick may be reached and still run as on time (later, it is a misfire). Defaults
    /// to the schedule's period or 1 s, whichever is shorter.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is zero.
    pub fn with_grace(mut self, grace: Duration) -> Result<Job> {
        if grace.is_zero() {
            return Err(Error::invalid_input("a job's grace is zero"));
        }
        self.grace = grace;
        Ok(self)
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("id", &self.id)
            .field("schedule", &self.schedule)
            .field("misfire", &self.misfire)
            .field("busy", &self.busy)
            .field("grace", &self.grace)
            .finish()
    }
}

/// A won tick being run: what the job's function gets.
pub struct Run {
    claim: TickClaim,
}

impl Run {
    /// The job's id.
    pub fn job_id(&self) -> &str {
        self.claim.job_id()
    }

    /// The tick being run.
    pub fn tick(&self) -> SystemTime {
        self.claim.tick()
    }

    /// The tick claim's token: one higher for every tick of the job won, a fencing token.
    pub fn token(&self) -> i64 {
        self.claim.token()
    }

    /// When the job's busy period ends at the latest, by this process's clock: stop by then, or
    /// the next tick's run may start beside this one (and this one's fence refuses its writes).
    pub fn deadline(&self) -> Instant {
        self.claim.deadline()
    }

    /// Checks, inside a write's transaction, that this run is still the job's latest claim and
    /// busy (see [`TickClaim::fence`]).
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        self.claim.fence(tx)
    }
}

impl fmt::Debug for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Run")
            .field("job_id", &self.job_id())
            .field("tick", &self.tick())
            .field("token", &self.token())
            .finish()
    }
}

/// What a scheduler reports; every method defaults to doing nothing. Called on the thread that
/// runs the job.
pub trait ScheduleHooks: Send + Sync {
    /// A won tick is about to run.
    fn started(&self, run: &Run) {
        let _ = run;
    }
    /// A run returned `Ok` after `took`.
    fn finished(&self, run: &Run, took: Duration) {
        let _ = (run, took);
    }
    /// A run returned an error or panicked (the scheduler goes on).
    fn failed(&self, run: &Run, error: &Error) {
        let _ = (run, error);
    }
    /// A due tick was not run here: another instance won it, or the job was still busy.
    fn refused(&self, job_id: &str, tick: SystemTime) {
        let _ = (job_id, tick);
    }
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoScheduleHooks;

impl ScheduleHooks for NoScheduleHooks {}

/// A job and what the scheduler keeps of it.
pub(super) struct JobState {
    pub(super) job: Job,
    /// The next tick to consider (database time); `None` before the first look.
    next: Mutex<Option<SystemTime>>,
    /// Whether this scheduler is running the job now.
    running: AtomicBool,
}

impl JobState {
    pub(super) fn new(job: Job) -> JobState {
        JobState {
            job,
            next: Mutex::new(None),
            running: AtomicBool::new(false),
        }
    }

    /// When the job next needs a look (database time); `None`: at once.
    pub(super) fn next_due(&self) -> Option<SystemTime> {
        *self.next.lock()
    }

    /// The tick to claim now (`now`: the database clock), if one is due, and moves on past it. A
    /// tick reached within the grace runs; a later one is missed: the current tick still runs if
    /// it is within the grace, else the misfire rule decides.
    pub(super) fn take_due(&self, now: SystemTime) -> Option<SystemTime> {
        let schedule = &self.job.schedule;
        let mut next = self.next.lock();
        let latest = schedule.at_or_before(now);
        let candidate = match *next {
            Some(due) if due > now => return None,
            Some(due) => due,
            None => latest,
        };
        let late = |tick: SystemTime| now.duration_since(tick).unwrap_or_default();
        let tick = if late(candidate) <= self.job.grace {
            Some(candidate)
        } else if late(latest) <= self.job.grace {
            Some(latest)
        } else {
            match self.job.misfire {
                Misfire::RunOnce { within } if late(latest) <= within => Some(latest),
                _ => {
                    log::info!(target: "pgtenure::schedule", "job {:?}: skipped missed ticks up to {latest:?}", self.job.id);
                    None
                }
            }
        };
        *next = Some(schedule.after(tick.unwrap_or(latest)));
        tick
    }

    /// Marks the job running here, or `None` when it already is.
    pub(super) fn start_running(&self) -> Option<Running<'_>> {
        (!self.running.swap(true, Ordering::AcqRel)).then_some(Running(&self.running))
    }

    /// Runs a won tick: the hooks around it, its failure caught, the claim released after.
    pub(super) fn run(&self, claim: TickClaim, hooks: &dyn super::ScheduleHooks) {
        let run = Run { claim };
        hooks.started(&run);
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| (self.job.run)(&run)));
        let took = started.elapsed();
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("returned an error: {e}")),
            Err(_) => Some("panicked".to_owned()),
        };
        match failure {
            None => {
                log::debug!(target: "pgtenure::schedule", "job {:?} ran tick {:?} in {took:?}", self.job.id, run.tick());
                hooks.finished(&run, took);
            }
            Some(why) => {
                let error = Error::new(
                    crate::ErrorKind::Database,
                    format!(
                        "job {:?}, tick {:?}: the run {why}",
                        self.job.id,
                        run.tick()
                    ),
                );
                log::error!(target: "pgtenure::schedule", "{error}");
                hooks.failed(&run, &error);
            }
        }
        if let Err(e) = run.claim.release() {
            log::warn!(target: "pgtenure::schedule", "job {:?}: could not release its tick: {e}", self.job.id);
        }
    }
}

/// Marks a job not running when dropped.
pub(super) struct Running<'a>(&'a AtomicBool);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    fn job(period_ms: u64, misfire: Misfire) -> JobState {
        let schedule = Schedule::every(Duration::from_millis(period_ms)).unwrap();
        JobState::new(
            Job::new("j", schedule, |_| Ok(()))
                .unwrap()
                .with_misfire(misfire),
        )
    }

    #[test]
    fn ticks_fall_on_whole_multiples_of_the_period() {
        let every = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(every.at_or_before(at(125, 500)), at(120, 0));
        assert_eq!(every.after(at(125, 500)), at(180, 0));
        assert_eq!(every.after(at(120, 0)), at(180, 0));
        assert!(Schedule::every(Duration::ZERO)
            .unwrap_err()
            .is_invalid_input());
    }

    #[test]
    fn an_on_time_tick_runs_once_and_the_next_waits_for_its_time() {
        let j = job(1000, Misfire::Skip);
        assert_eq!(j.take_due(at(10, 200)), Some(at(10, 0)), "within the grace");
        assert_eq!(j.take_due(at(10, 300)), None, "taken");
        assert_eq!(j.next_due(), Some(at(11, 0)));
        assert_eq!(j.take_due(at(11, 5)), Some(at(11, 0)));
    }

    #[test]
    fn missed_ticks_are_skipped_or_the_latest_run_once() {
        // Daily ticks, first looked at 5 h after one fell: missed.
        let day = 86_400_000;
        let skip = job(day, Misfire::Skip);
        assert_eq!(skip.take_due(at(86_400 + 5 * 3600, 0)), None);
        assert_eq!(skip.next_due(), Some(at(2 * 86_400, 0)));
        let once = job(
            day,
            Misfire::RunOnce {
                within: Duration::from_secs(6 * 3600),
            },
        );
        assert_eq!(once.take_due(at(86_400 + 5 * 3600, 0)), Some(at(86_400, 0)));
        let too_old = job(
            day,
            Misfire::RunOnce {
                within: Duration::from_secs(3600),
            },
        );
        assert_eq!(too_old.take_due(at(86_400 + 5 * 3600, 0)), None);
        // A pause over many ticks: the old ones are skipped, the current one runs if on time.
        let j = job(1000, Misfire::Skip);
        assert_eq!(j.take_due(at(10, 0)), Some(at(10, 0)));
        assert_eq!(j.take_due(at(15, 300)), Some(at(15, 0)));
        assert_eq!(j.next_due(), Some(at(16, 0)));
    }

    #[test]
    fn a_job_runs_once_at_a_time_here() {
        let j = job(1000, Misfire::Skip);
        let first = j.start_running().expect("idle");
        assert!(j.start_running().is_none());
        drop(first);
        assert!(j.start_running().is_some());
    }
}
