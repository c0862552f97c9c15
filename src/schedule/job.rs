//! Jobs: their schedule and options, the run a won tick gets, and which tick is due.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{after, bounded, select, Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::input::{check_key, micros, MIN_DURATION};
use crate::observe;
use crate::tick_claims::TickClaim;

/// When a job's ticks fall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Every(Duration),
    #[cfg(feature = "cron")]
    Cron(std::sync::Arc<super::cron::CronTicks>),
}

impl Schedule {
    /// Every `period`, at whole multiples of it since the Unix epoch (every minute: on the minute),
    /// so every instance computes the same ticks.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when `period` is under 1 ms or
    /// over 100 years.
    pub fn every(period: Duration) -> Result<Schedule> {
        micros("schedule period", period, MIN_DURATION)?;
        Ok(Schedule {
            kind: Kind::Every(period),
        })
    }

    /// The ticks of a cron expression, read in UTC (feature `cron`): five fields (minute, hour,
    /// day of month, month, day of week) as in crontab, or six with a leading seconds field;
    /// `L`, `W` and `#` as in Quartz. A day of month and a day of week both given match either,
    /// as in crontab.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when the expression does not
    /// parse or never matches a time.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron(expr: &str) -> Result<Schedule> {
        Schedule::cron_in(expr, "UTC")
    }

    /// The ticks of a cron expression read in the time zone `zone`, an IANA name such as
    /// `"Europe/Paris"` looked up in the system's time zone database (feature `cron`). Across a
    /// daylight-saving change the ticks follow the wall clock as cron's do: a fixed time skipped by
    /// the change ticks at the change (`30 2 * * *` at 03:00 on the spring night in Paris), a
    /// fixed time that occurs twice ticks once, at its first occurrence (a daily job does not run
    /// twice), and an expression whose hour is a wildcard or a step ticks in both hours. Every
    /// instance of a fleet must give the same zone, or they compute different ticks.
    ///
    /// # Errors
    ///
    /// As [`Schedule::cron`], and when the zone is not known here.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron_in(expr: &str, zone: &str) -> Result<Schedule> {
        Ok(Schedule {
            kind: Kind::Cron(std::sync::Arc::new(super::cron::CronTicks::parse(
                expr, zone,
            )?)),
        })
    }

    /// The time between ticks of a schedule made by [`Schedule::every`]; `None` for a cron
    /// schedule, whose gaps vary.
    pub fn period(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Every(period) => Some(*period),
            #[cfg(feature = "cron")]
            Kind::Cron(_) => None,
        }
    }

    /// The latest tick at or before `t`, if there is one.
    pub(crate) fn at_or_before(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.kind {
            Kind::Every(period) => {
                let since = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
                let period = period.as_micros().max(1);
                Some(UNIX_EPOCH + Duration::from_micros((since / period * period) as u64))
            }
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.at_or_before(t),
        }
    }

    /// The first tick after `t`, if there is one.
    pub(crate) fn after(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.kind {
            Kind::Every(period) => Some(self.at_or_before(t)? + *period),
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.after(t),
        }
    }

    /// The time from `tick` to the tick after it (a day when none follows).
    pub(crate) fn gap_after(&self, tick: SystemTime) -> Duration {
        self.after(tick)
            .and_then(|next| next.duration_since(tick).ok())
            .unwrap_or(Duration::from_secs(86_400))
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
    /// misfire, reported to [`ScheduleHooks::missed`]). Lateness is checked twice: when a worker
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
    fn grace_for(&self, tick: SystemTime) -> Duration {
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
    fn draw_delay(&self) -> Duration {
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
    /// The scheduler extends the busy period every third of it while the run goes on, so the
    /// deadline moves later as long as the database can be reached: read it again as you go.
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

    /// This run's fence as a value (its tick claim's: job id, owner, token), for any driver to run
    /// inside its own transaction ([`crate::fence`]). [`Run::fence`] runs it.
    pub fn fence_statement(&self) -> Fence {
        self.claim.fence_statement()
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

/// What a scheduler reports; every method defaults to doing nothing. `started`, `finished`,
/// `failed`, `refused` and `error` are called on the worker that claimed the tick; `missed` and
/// `panicked` may be called on the timer thread, where a slow hook delays every job's next tick:
/// keep them short (count, log, send on a channel). A hook that panics is caught and reported to
/// `panicked`; the run's claim is released all the same.
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
    /// Claiming a due tick failed (logged too: at `error` when waiting cannot fix it, such as a
    /// missing table or privilege). The tick is looked at again a second later, under the job's
    /// [`Misfire`] rule: tried again while within its grace, and a tick missed through an outage
    /// is a misfire like any other.
    fn error(&self, job_id: &str, tick: SystemTime, error: &Error) {
        let _ = (job_id, tick, error);
    }
    /// Ticks of the job up to `tick` were missed and will not run here: reached later than the
    /// job's grace (the fleet was down, this instance was paused or its workers were busy), or won
    /// too late by the clock the claim read. Under [`Misfire::RunOnce`] the latest missed tick
    /// may still run, and is then not reported.
    fn missed(&self, job_id: &str, tick: SystemTime) {
        let _ = (job_id, tick);
    }
    /// A scheduler thread caught a panic of its own code or of a hook (runs' panics go to
    /// [`ScheduleHooks::failed`]). It is logged at `error`, and the thread goes on.
    fn panicked(&self, error: &Error) {
        let _ = error;
    }
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoScheduleHooks;

impl ScheduleHooks for NoScheduleHooks {}

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

    /// Runs a won tick: the hooks around it, its failure caught, the claim released after.
    ///
    /// While the run goes on, a thread of its own (`pgtenure-schedule-busy`) extends the claim's
    /// busy period every third of it, so no instance claims a later tick of the job before this
    /// run ends, however long it takes; it is joined when the run returns (at most one extension
    /// statement later).
    ///
    /// The claim is released whatever happens, a panicking hook included; such a panic is then
    /// resumed for the caller to report.
    /// `running` counts the run in progress until the job's function returns (not the release and
    /// the hooks after it, which a stopping scheduler does not wait for).
    pub(super) fn run(
        &self,
        claim: TickClaim,
        hooks: &dyn super::ScheduleHooks,
        running: super::Counted<'_>,
    ) {
        let busy = self.job.busy_for(claim.tick());
        let run = Run { claim };
        let hooked = catch_unwind(AssertUnwindSafe(|| {
            hooks.started(&run);
            let started = Instant::now();
            let outcome = std::thread::scope(|scope| {
                let (done, finished) = bounded::<()>(0);
                let claim = &run.claim;
                let keeper = std::thread::Builder::new()
                    .name("pgtenure-schedule-busy".into())
                    .spawn_scoped(scope, move || keep_busy(claim, busy, &finished));
                if let Err(e) = &keeper {
                    log::warn!(target: "pgtenure::schedule", "job {:?}: could not start the thread that keeps its run busy ({e}); the run is busy for {busy:?} only", self.job.id);
                }
                let outcome = catch_unwind(AssertUnwindSafe(|| (self.job.run)(&run)));
                drop(running);
                drop(done);
                outcome
            });
            let took = started.elapsed();
            let (label, failure) = match outcome {
                Ok(Ok(())) => ("ok", None),
                Ok(Err(e)) => ("failed", Some(format!("returned an error: {e}"))),
                Err(_) => ("panicked", Some("panicked".to_owned())),
            };
            observe::job_ended(&self.job.id, label, took);
            match failure {
                None => {
                    log::debug!(target: "pgtenure::schedule", "job {:?} ran tick {:?} in {took:?}", self.job.id, run.tick());
                    hooks.finished(&run, took);
                }
                Some(why) => {
                    let error = Error::new(
                        crate::error::ErrorKind::Database,
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
        }));
        if let Err(e) = run.claim.release() {
            log::warn!(target: "pgtenure::schedule", "job {:?}: could not release its tick: {e}", self.job.id);
        }
        if let Err(panic) = hooked {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Extends `claim`'s busy period every third of `busy` until `finished` disconnects, or until the
/// claim is no longer busy (lapsed while this process could not reach the database, or taken).
fn keep_busy(claim: &TickClaim, busy: Duration, finished: &Receiver<()>) {
    let every = (busy / 3).max(MIN_DURATION);
    let mut wait = every;
    loop {
        select! {
            recv(finished) -> _ => return,
            recv(after(wait)) -> _ => {}
        }
        match claim.extend(busy) {
            Ok(true) => wait = every,
            Ok(false) => {
                log::warn!(target: "pgtenure::schedule", "job {:?}: the run of tick {:?} is no longer busy (its busy period lapsed, or it was released); it should stop by its deadline", claim.job_id(), claim.tick());
                return;
            }
            Err(e) => {
                log::warn!(target: "pgtenure::schedule", "job {:?}: could not extend the busy period of its run ({e}); trying again", claim.job_id());
                wait = (every / 3).max(MIN_DURATION);
            }
        }
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
    fn ticks_fall_on_whole_multiples_of_the_period() {
        let every = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(every.at_or_before(at(125, 500)), Some(at(120, 0)));
        assert_eq!(every.after(at(125, 500)), Some(at(180, 0)));
        assert_eq!(every.after(at(120, 0)), Some(at(180, 0)));
        assert_eq!(every.period(), Some(Duration::from_secs(60)));
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
