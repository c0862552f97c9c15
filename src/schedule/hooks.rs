//! What a scheduler reports, to hooks the user attaches.

use std::time::{Duration, SystemTime};

use super::Run;
use crate::error::Error;

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
    /// [`Misfire`](super::Misfire) rule: tried again while within its grace, and a tick missed
    /// through an outage is a misfire like any other.
    fn error(&self, job_id: &str, tick: SystemTime, error: &Error) {
        let _ = (job_id, tick, error);
    }
    /// Ticks of the job up to `tick` were missed and will not run here: reached later than the
    /// job's grace (the fleet was down, this instance was paused or its workers were busy), or won
    /// too late by the clock the claim read. Under [`Misfire::RunOnce`](super::Misfire::RunOnce)
    /// the latest missed tick may still run, and is then not reported.
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
