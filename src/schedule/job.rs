//! A job and its options: what to do with missed ticks, how long a run keeps it busy, its grace
//! and jitter.

use std::fmt;
use std::time::{Duration, SystemTime};

use super::{Run, Schedule};
use crate::error::Result;
use crate::input::{check_key, micros, MIN_DURATION};

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
/// [`ScheduleHooks::failed`](super::ScheduleHooks::failed); the scheduler goes on.
pub type RunResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// The function a job runs for each tick won.
type RunFn = dyn Fn(&Run) -> RunResult + Send + Sync;

/// A job and its options, for [`Scheduler::with_job`](super::Scheduler::with_job).
pub struct Job {
    pub(super) id: String,
    pub(super) schedule: Schedule,
    pub(super) run: Box<RunFn>,
    pub(super) misfire: Misfire,
    /// `None`: until the next tick.
    busy: Option<Duration>,
    /// `None`: the time to the next tick or 1 s, whichever is shorter.
    grace: Option<Duration>,
    /// `None`: no jitter.
    jitter: Option<Duration>,
}

impl Job {
    /// A job that calls `run` for every tick of `schedule` this instance wins; misfires skipped,
    /// busy until its next tick, a grace of the time to its next tick or 1 s, whichever is
    /// shorter, and no jitter.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) for a blank, NUL-carrying or
    /// over-long id.
    pub fn new(
        id: &str,
        schedule: Schedule,
        run: impl Fn(&Run) -> RunResult + Send + Sync + 'static,
    ) -> Result<Job> {
        check_key("job id", id)?;
        Ok(Job {
            id: id.to_owned(),
            schedule,
            run: Box::new(run),
            misfire: Misfire::Skip,
            busy: None,
            grace: None,
            jitter: None,
        })
    }

    /// What to do with missed ticks. Defaults to [`Misfire::Skip`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when a
    /// [`Misfire::RunOnce`] window is under 1 ms or over 100 years (nothing is clamped).
    pub fn with_misfire(mut self, misfire: Misfire) -> Result<Job> {
        if let Misfire::RunOnce { within } = misfire {
            micros(
                "misfire window (Misfire::RunOnce within)",
                within,
                MIN_DURATION,
            )?;
        }
        self.misfire = misfire;
        Ok(self)
    }

    /// How long a won tick keeps the job busy fleet-wide: no later tick starts anywhere meanwhile.
    /// The scheduler extends it every third of it while the run goes on and releases it when the
    /// run ends, so a run may take longer than its busy period; the busy period bounds how long the
    /// job stays blocked after this instance stops extending it (it crashed, paused or lost the
    /// database), and [`Run::deadline`] is when the run must stop then. Defaults to the time until
    /// the job's next tick (its period, for [`Schedule::every`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years.
    pub fn with_busy(mut self, busy: Duration) -> Result<Job> {
        micros("busy period", busy, MIN_DURATION)?;
        self.busy = Some(busy);
        Ok(self)
    }

    /// How late by the database clock a tick may start and still run as on time (later, it is a
    /// misfire, reported to [`ScheduleHooks::missed`](super::ScheduleHooks::missed)). Lateness is checked twice: when a worker
    /// takes the tick, and against the clock the winning claim read. Defaults to the time until the
    /// job's next tick or 1 s, whichever is shorter.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years.
    pub fn with_grace(mut self, grace: Duration) -> Result<Job> {
        micros("grace", grace, MIN_DURATION)?;
        self.grace = Some(grace);
        Ok(self)
    }

    /// Delays this instance's claim of each tick by a random time up to `jitter`, drawn anew per
    /// tick: spreads the fleet's claims and the runs' start over that window (useful when many
    /// jobs tick at once, at `:00`). The run's [`Run::tick`] stays the tick; the grace is counted
    /// from the end of the window. Defaults to no jitter.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years.
    pub fn with_jitter(mut self, jitter: Duration) -> Result<Job> {
        micros("jitter", jitter, MIN_DURATION)?;
        self.jitter = Some(jitter);
        Ok(self)
    }

    /// The busy period of `tick`'s claim.
    pub(super) fn busy_for(&self, tick: SystemTime) -> Duration {
        self.busy
            .unwrap_or_else(|| self.schedule.gap_after(tick))
            .max(MIN_DURATION)
    }

    /// How late `tick` may be reached and still run.
    pub(super) fn grace_for(&self, tick: SystemTime) -> Duration {
        let grace = self
            .grace
            .unwrap_or_else(|| self.schedule.gap_after(tick).min(Duration::from_secs(1)));
        grace.saturating_add(self.jitter.unwrap_or_default())
    }

    /// How late `tick` may start at all: its grace, or the misfire window when that is longer.
    pub(super) fn allowed_lateness(&self, tick: SystemTime) -> Duration {
        match self.misfire {
            Misfire::RunOnce { within } => within.max(self.grace_for(tick)),
            Misfire::Skip => self.grace_for(tick),
        }
    }

    /// This instance's delay for one tick: up to the jitter.
    pub(super) fn draw_delay(&self) -> Duration {
        match self.jitter {
            Some(jitter) => {
                let us = u64::try_from(jitter.as_micros()).unwrap_or(u64::MAX).max(1);
                Duration::from_micros(crate::instance::random_u64() % us)
            }
            None => Duration::ZERO,
        }
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
            .field("jitter", &self.jitter)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::MAX_DURATION;

    #[test]
    fn a_misfire_window_out_of_range_is_refused_not_clamped() {
        let job = || {
            Job::new(
                "j",
                Schedule::every(Duration::from_secs(1)).unwrap(),
                |_| Ok(()),
            )
        };
        for within in [
            Duration::ZERO,
            MAX_DURATION + Duration::from_micros(1),
            Duration::MAX,
        ] {
            let err = job()
                .unwrap()
                .with_misfire(Misfire::RunOnce { within })
                .unwrap_err();
            assert!(err.is_invalid_input(), "{within:?}: {err}");
            assert!(err.to_string().contains("misfire window"), "{err}");
        }
        for within in [MIN_DURATION, MAX_DURATION] {
            let job = job()
                .unwrap()
                .with_misfire(Misfire::RunOnce { within })
                .unwrap();
            assert_eq!(job.misfire, Misfire::RunOnce { within });
        }
    }
}
