//! What the scheduler keeps of a job: which tick is due next (and which were missed), and whether
//! a worker has the job in hand.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use super::{Job, Misfire};

/// A job and what the scheduler keeps of it.
pub(super) struct JobState {
    pub(super) job: Job,
    next: Mutex<Next>,
    /// Whether this scheduler has handed the job to a worker (claiming or running it).
    running: AtomicBool,
    /// Wakes a started scheduler's timer when the job is freed.
    wake: OnceLock<Sender<()>>,
}

/// The job's next tick as this instance sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Not looked at yet: the latest tick is considered at the first look.
    Unknown,
    /// `tick`, to be claimed here from `at` (the tick plus this instance's jitter), both by the
    /// database clock.
    At { tick: SystemTime, at: SystemTime },
    /// The schedule has no later tick.
    Never,
}

/// What one look at a job found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Due {
    /// The tick to claim now.
    pub(super) run: Option<SystemTime>,
    /// The latest tick skipped as missed, if any was.
    pub(super) missed: Option<SystemTime>,
}

impl JobState {
    pub(super) fn new(job: Job) -> JobState {
        JobState {
            job,
            next: Mutex::new(Next::Unknown),
            running: AtomicBool::new(false),
            wake: OnceLock::new(),
        }
    }

    /// When the job next needs a look (database time); `None`: never again.
    pub(super) fn next_due(&self) -> Option<SystemTime> {
        match *self.next.lock() {
            Next::At { at, .. } => Some(at),
            Next::Unknown => Some(UNIX_EPOCH),
            Next::Never => None,
        }
    }

    /// Looks at the job at `now` (the database clock) and moves on past what it returns: the tick
    /// to claim now, if one is due, and the latest tick skipped as missed. A tick reached within
    /// the grace runs; a later one is missed: the current tick still runs if it is within the
    /// grace, else the misfire rule decides.
    pub(super) fn look(&self, now: SystemTime) -> Due {
        let job = &self.job;
        let mut next = self.next.lock();
        let candidate = match *next {
            Next::Never => return Due::default(),
            Next::At { at, .. } if at > now => return Due::default(),
            Next::At { tick, .. } => Some(tick),
            Next::Unknown => None,
        };
        let latest = job.schedule.at_or_before(now);
        let late = |tick: SystemTime| now.duration_since(tick).unwrap_or_default();
        let on_time = |tick: &SystemTime| late(*tick) <= job.grace_for(*tick);
        let before = |tick: SystemTime| {
            tick.checked_sub(Duration::from_micros(1))
                .and_then(|t| job.schedule.at_or_before(t))
        };
        // The tick due now, if it is within its grace.
        let current = latest.filter(on_time);
        // Under RunOnce, a tick run to make up for missed ones; the current one then runs after it.
        let mut make_up = false;
        let tick = match (candidate.filter(on_time), job.misfire, candidate) {
            (Some(tick), _, _) => Some(tick),
            (None, Misfire::Skip, _) => current,
            // Ticks were missed since the candidate: the latest of them runs once, then the
            // current one.
            (None, Misfire::RunOnce { within }, Some(first)) => {
                let missed = match current {
                    Some(current) => before(current).filter(|t| *t >= first),
                    None => latest,
                };
                match missed.filter(|t| late(*t) <= within) {
                    Some(missed) => {
                        make_up = current.is_some();
                        Some(missed)
                    }
                    None => current,
                }
            }
            // The first look: the latest tick, on time or within the window.
            (None, Misfire::RunOnce { within }, None) => {
                current.or_else(|| latest.filter(|t| late(*t) <= within))
            }
        };
        // Ticks passed over: from the candidate (or, at the first look, none) up to the latest.
        let missed = match (tick, candidate) {
            (None, Some(_)) => latest.or(candidate),
            (Some(run), Some(first)) if run > first => before(run),
            _ => None,
        };
        if let Some(missed) = missed {
            log::info!(target: "pgtenure::schedule", "job {:?}: skipped missed ticks up to {missed:?}", job.id);
        }
        *next = match (make_up, current) {
            (true, Some(current)) => Next::At {
                tick: current,
                at: current,
            },
            _ => match job.schedule.after(tick.or(latest).unwrap_or(now)) {
                Some(following) => Next::At {
                    tick: following,
                    at: following.checked_add(job.draw_delay()).unwrap_or(following),
                },
                None => Next::Never,
            },
        };
        Due { run: tick, missed }
    }

    /// [`JobState::look`]'s tick to run.
    #[cfg(test)]
    fn take_due(&self, now: SystemTime) -> Option<SystemTime> {
        self.look(now).run
    }

    /// Puts `tick` back, to be looked at again from `at` (database time): its claim failed, or it
    /// was not yet due by the database clock.
    pub(super) fn retry(&self, tick: SystemTime, at: SystemTime) {
        *self.next.lock() = Next::At { tick, at };
    }

    /// Has `wake` told whenever the job is freed (a started scheduler's timer).
    pub(super) fn wake_on_free(&self, wake: Sender<()>) {
        let _ = self.wake.set(wake);
    }

    /// Whether a worker has the job in hand.
    pub(super) fn is_reserved(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Reserves the job for one worker, or `None` when this scheduler already has it in hand.
    pub(super) fn reserve(self: &Arc<Self>) -> Option<Reservation> {
        (!self.running.swap(true, Ordering::AcqRel)).then(|| Reservation(Arc::clone(self)))
    }
}

/// A job reserved for one worker ([`JobState::reserve`]); dropping it frees the job.
pub(super) struct Reservation(Arc<JobState>);

impl Reservation {
    pub(super) fn job(&self) -> &Arc<JobState> {
        &self.0
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
        if let Some(wake) = self.0.wake.get() {
            let _ = wake.try_send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::MAX_DURATION;
    use crate::schedule::Schedule;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    fn job(period_ms: u64, misfire: Misfire) -> JobState {
        let schedule = Schedule::every(Duration::from_millis(period_ms)).unwrap();
        JobState::new(
            Job::new("j", schedule, |_| Ok(()))
                .unwrap()
                .with_misfire(misfire)
                .unwrap(),
        )
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
    fn after_a_pause_of_the_fleet_the_missed_ticks_follow_the_misfire_rule() {
        // Every 10 s (grace 1 s); the fleet runs the tick at 10 s, then is down until 45 s.
        let every_10s = |misfire| {
            let schedule = Schedule::every(Duration::from_secs(10)).unwrap();
            JobState::new(
                Job::new("j", schedule, |_| Ok(()))
                    .unwrap()
                    .with_misfire(misfire)
                    .unwrap(),
            )
        };
        let skip = every_10s(Misfire::Skip);
        assert_eq!(skip.take_due(at(10, 0)), Some(at(10, 0)));
        assert_eq!(skip.take_due(at(45, 0)), None, "20, 30 and 40 missed");
        assert_eq!(skip.next_due(), Some(at(50, 0)));
        assert_eq!(skip.take_due(at(50, 100)), Some(at(50, 0)));
        let once = every_10s(Misfire::RunOnce {
            within: Duration::from_secs(10),
        });
        assert_eq!(once.take_due(at(10, 0)), Some(at(10, 0)));
        assert_eq!(
            once.take_due(at(45, 0)),
            Some(at(40, 0)),
            "the latest, once"
        );
        assert_eq!(once.take_due(at(45, 1)), None, "not again");
        assert_eq!(once.next_due(), Some(at(50, 0)));
        let too_long = every_10s(Misfire::RunOnce {
            within: Duration::from_secs(3),
        });
        assert_eq!(too_long.take_due(at(10, 0)), Some(at(10, 0)));
        assert_eq!(too_long.take_due(at(45, 0)), None, "the latest is 5 s old");
    }

    #[test]
    fn busy_and_grace_default_to_the_time_until_the_next_tick() {
        let j = job(250, Misfire::Skip).job;
        assert_eq!(j.busy_for(at(10, 0)), Duration::from_millis(250));
        assert_eq!(j.grace_for(at(10, 0)), Duration::from_millis(250));
        let j = job(60_000, Misfire::Skip).job;
        assert_eq!(j.grace_for(at(60, 0)), Duration::from_secs(1));
        let j = j.with_busy(Duration::from_secs(5)).unwrap();
        assert_eq!(j.busy_for(at(60, 0)), Duration::from_secs(5));
    }

    #[test]
    fn jitter_delays_this_instances_claim_within_its_window_and_widens_the_grace() {
        let schedule = Schedule::every(Duration::from_secs(10)).unwrap();
        let jitter = Duration::from_secs(2);
        let j = JobState::new(
            Job::new("j", schedule, |_| Ok(()))
                .unwrap()
                .with_jitter(jitter)
                .unwrap(),
        );
        assert_eq!(j.take_due(at(10, 0)), Some(at(10, 0)));
        let mut delays = std::collections::BTreeSet::new();
        for n in 2..40 {
            let due = j.next_due().unwrap();
            let tick = at(n * 10, 0);
            assert!(due >= tick && due < tick + jitter, "{due:?} for {tick:?}");
            delays.insert(due.duration_since(tick).unwrap());
            // Not due before this instance's own moment, due at it; late by the grace plus the
            // jitter still runs.
            if due > tick {
                assert_eq!(j.take_due(tick), None);
            }
            assert_eq!(
                j.take_due(tick + jitter + Duration::from_millis(900)),
                Some(tick)
            );
        }
        assert!(delays.len() > 30, "the delay is drawn anew per tick");
        assert!(Job::new(
            "j",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            |_| Ok(())
        )
        .unwrap()
        .with_jitter(Duration::ZERO)
        .is_err());
    }

    #[cfg(feature = "cron")]
    #[test]
    fn a_cron_job_is_due_at_its_ticks_and_busy_until_the_next() {
        // At minute 0 and 30 of every hour.
        let j = JobState::new(
            Job::new("j", Schedule::cron("0,30 * * * *").unwrap(), |_| Ok(())).unwrap(),
        );
        assert_eq!(j.job.schedule.period(), None);
        assert_eq!(
            j.take_due(at(3600 + 10, 0)),
            None,
            "missed by 10 s: skipped"
        );
        assert_eq!(j.next_due(), Some(at(3600 + 1800, 0)));
        assert_eq!(j.take_due(at(3600 + 1800, 400)), Some(at(3600 + 1800, 0)));
        assert_eq!(
            j.job.busy_for(at(3600 + 1800, 0)),
            Duration::from_secs(1800)
        );
        assert_eq!(j.next_due(), Some(at(7200, 0)));
    }

    #[test]
    fn a_job_runs_once_at_a_time_here() {
        // A refused reservation must not free the job (issue 23: it did, and a second worker
        // started a later tick beside the run in progress).
        let j = Arc::new(job(1000, Misfire::Skip));
        let first = j.reserve().expect("idle");
        assert!(j.reserve().is_none());
        assert!(j.reserve().is_none(), "still reserved after a refusal");
        drop(first);
        assert!(j.reserve().is_some());
    }

    #[test]
    fn the_longest_durations_neither_overflow_nor_panic() {
        // Issue 23, defect 8: a grace of Duration::MAX with a jitter panicked.
        assert!(job(1000, Misfire::Skip)
            .job
            .with_grace(Duration::MAX)
            .unwrap_err()
            .is_invalid_input());
        let longest = Job::new("j", Schedule::every(MAX_DURATION).unwrap(), |_| Ok(()))
            .unwrap()
            .with_grace(MAX_DURATION)
            .unwrap()
            .with_jitter(MAX_DURATION)
            .unwrap()
            .with_busy(MAX_DURATION)
            .unwrap()
            .with_misfire(Misfire::RunOnce {
                within: MAX_DURATION,
            })
            .unwrap();
        let j = JobState::new(longest);
        for now in [at(0, 0), at(10, 0), at(253_402_300_000, 0)] {
            let _ = j.look(now);
            let _ = j.next_due();
        }
        let _ = j.job.allowed_lateness(at(10, 0));
    }

    #[test]
    fn a_look_reports_the_ticks_it_skipped() {
        let j = job(1000, Misfire::Skip);
        assert_eq!(j.look(at(10, 0)).run, Some(at(10, 0)));
        // Reached at 15.3 s: 11 to 14 missed, 15 on time.
        assert_eq!(
            j.look(at(15, 300)),
            Due {
                run: Some(at(15, 0)),
                missed: Some(at(14, 0))
            }
        );
        // Reached 5 s late with no tick on time: all missed.
        let j = job(10_000, Misfire::Skip);
        assert_eq!(j.look(at(10, 0)).run, Some(at(10, 0)));
        assert_eq!(
            j.look(at(25, 0)),
            Due {
                run: None,
                missed: Some(at(20, 0))
            }
        );
        // A tick put back after a failed claim is looked at again, under the misfire rule.
        let once = job(
            2000,
            Misfire::RunOnce {
                within: Duration::from_secs(30),
            },
        );
        assert_eq!(once.take_due(at(10, 0)), Some(at(10, 0)));
        once.retry(at(10, 0), at(11, 0));
        assert_eq!(once.take_due(at(10, 500)), None, "not before its time");
        assert_eq!(
            once.take_due(at(17, 500)),
            Some(at(16, 0)),
            "the latest, once"
        );
        assert_eq!(once.next_due(), Some(at(18, 0)));
        // Back just as a tick falls due: the latest missed tick runs once, then the current one.
        once.retry(at(18, 0), at(19, 0));
        assert_eq!(once.take_due(at(22, 100)), Some(at(20, 0)), "made up");
        assert_eq!(once.take_due(at(22, 150)), Some(at(22, 0)), "then on time");
        assert_eq!(once.take_due(at(22, 200)), None);
        assert_eq!(once.next_due(), Some(at(24, 0)));
        // Under Skip, only the current one.
        let skip = job(2000, Misfire::Skip);
        assert_eq!(skip.take_due(at(10, 0)), Some(at(10, 0)));
        skip.retry(at(10, 0), at(11, 0));
        assert_eq!(skip.take_due(at(16, 100)), Some(at(16, 0)));
        assert_eq!(skip.next_due(), Some(at(18, 0)));
    }
}
