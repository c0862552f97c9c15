//! A started scheduler: a timer thread that hands due ticks to a bounded pool of workers.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{after, bounded, select, unbounded, Receiver, Sender};

use super::job::JobState;
use super::Scheduler;
use crate::error::{Error, Result};

/// How long the timer waits before trying again when the database clock cannot be read.
const RETRY_CLOCK: Duration = Duration::from_secs(1);

/// A started [`Scheduler`] ([`Scheduler::start`]); dropping it stops it as
/// [`Scheduling::stop`] does.
pub struct Scheduling {
    scheduler: Arc<Scheduler>,
    stop: Option<Sender<()>>,
    timer: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

impl Scheduler {
    /// Starts the scheduler: a timer thread (`pgtenure-schedule`) that wakes when the next tick is
    /// due by the database clock (it waits on a timer, never spins), and a pool of workers
    /// (`pgtenure-schedule-run`, [`Scheduler::with_workers`]) that claim the due ticks and run the
    /// ones won.
    ///
    /// It first reads the claims table once: an error that waiting cannot fix (the table is
    /// missing, the role lacks a privilege) is returned here, before any thread starts; a
    /// transient one (the database is unreachable) is logged, and the timer keeps trying.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when no job was added;
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when a thread cannot be started; a
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
        let (work, queue) = unbounded::<(Arc<JobState>, SystemTime)>();
        let mut workers = Vec::new();
        for _ in 0..scheduler.workers {
            let (scheduler, queue) = (Arc::clone(&scheduler), queue.clone());
            let worker = std::thread::Builder::new()
                .name("pgtenure-schedule-run".into())
                .spawn(move || {
                    for (job, tick) in queue {
                        if let Err(e) = scheduler.run_tick(&job, tick) {
                            if e.is_permanent() {
                                log::error!(target: "pgtenure::schedule", "job {:?}: could not claim tick {tick:?}: {e}", job.job.id);
                            } else {
                                log::warn!(target: "pgtenure::schedule", "job {:?}: could not claim tick {tick:?}: {e}", job.job.id);
                            }
                            scheduler.hooks.error(&job.job.id, tick, &e);
                        }
                    }
                })
                .map_err(|e| Error::setup("could not start a scheduler worker").with_source(e))?;
            workers.push(worker);
        }
        let (stop, stopped) = bounded::<()>(0);
        let timer = {
            let scheduler = Arc::clone(&scheduler);
            std::thread::Builder::new()
                .name("pgtenure-schedule".into())
                .spawn(move || scheduler.time(&stopped, &work))
                .map_err(|e| Error::setup("could not start the scheduler's timer").with_source(e))?
        };
        Ok(Scheduling {
            scheduler,
            stop: Some(stop),
            timer: Some(timer),
            workers,
        })
    }

    /// The timer: hands every due tick to the workers, then sleeps until the next one is due.
    fn time(&self, stopped: &Receiver<()>, work: &Sender<(Arc<JobState>, SystemTime)>) {
        loop {
            let wait = match self.db_now() {
                Ok(now) => {
                    for job in &self.jobs {
                        if let Some(tick) = job.take_due(now) {
                            let _ = work.send((Arc::clone(job), tick));
                        }
                    }
                    self.jobs
                        .iter()
                        .filter_map(|job| job.next_due())
                        .min()
                        .map_or(RETRY_CLOCK, |due| {
                            due.duration_since(now).unwrap_or_default()
                        })
                }
                Err(e) => {
                    log::warn!(target: "pgtenure::schedule", "cannot read the database clock: {e}");
                    RETRY_CLOCK
                }
            };
            select! {
                recv(stopped) -> _ => return,
                recv(after(wait)) -> _ => {}
            }
        }
    }
}

impl Scheduling {
    /// Stops: no new tick is claimed, the runs in progress finish (bounded by the jobs
    /// themselves: make them honour [`Run::deadline`](super::Run::deadline)), and every thread is
    /// joined.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when a thread panicked.
    pub fn stop(mut self) -> Result<()> {
        self.shut_down()
    }

    /// The scheduler, for [`Scheduler::run_pending`]-style checks from tests.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    fn shut_down(&mut self) -> Result<()> {
        drop(self.stop.take());
        let mut panicked = false;
        if let Some(timer) = self.timer.take() {
            // The timer owns the work queue's sender: once it is joined, the workers drain the
            // queue and end.
            panicked |= timer.join().is_err();
        }
        for worker in self.workers.drain(..) {
            panicked |= worker.join().is_err();
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
