//! How a won tick is run: the hooks around it, its busy period kept up while it goes on, its claim
//! released after.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, bounded, select, Receiver};

use super::hooks::ScheduleHooks;
use super::job_state::JobState;
use super::run::Run;
use super::Counted;
use crate::error::Error;
use crate::input::MIN_DURATION;
use crate::observe;
use crate::tick_claims::TickClaim;

impl JobState {
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
    pub(super) fn run(&self, claim: TickClaim, hooks: &dyn ScheduleHooks, running: Counted<'_>) {
        let busy = self.job.busy_for(claim.tick());
        let run = Run::new(claim);
        let hooked = catch_unwind(AssertUnwindSafe(|| {
            hooks.started(&run);
            let started = Instant::now();
            let outcome = std::thread::scope(|scope| {
                let (done, finished) = bounded::<()>(0);
                let claim = run.claim();
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
        if let Err(e) = run.into_claim().release() {
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
