//! The leaser: its state, heartbeats, sweeps, release (its rebalance step is in `tick.rs`).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Mutex, MutexGuard};

use super::config::{Config, Hooks, NoHooks};
use super::deliver::{Delivery, Outbox};
use super::local::{stop_after, Lapse, Local};
use super::sql::{Batch, Heartbeat, Statements};
use super::unit::{Reconciler, Unit, UnitLoss};
use super::warm_up::WarmUp;
use crate::busy::Busy;
use crate::db::Db;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::Fence;
use crate::input::{micros, MIN_DURATION};
use crate::observe;
use crate::outage::Reach;
use crate::table_name::TableName;

/// How many process rows and units a [`Leaser::sweep`] removed and freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Process rows deleted.
    pub processes: u64,
    /// Units freed.
    pub units: u64,
}

/// How many times `delete_process` tells the reconciler everything is lost before giving up on a
/// tick that keeps adopting units meanwhile.
const MAX_FAREWELLS: usize = 3;

/// A process's membership: its heartbeat row and the units it owns; see the [module docs](super).
///
/// `Send` and `Sync`: share it in an `Arc` between the thread that calls [`Leaser::run`] and the
/// rest of the application. Ticks are serialized.
pub struct Leaser {
    db: Db,
    reconciler: Arc<dyn Reconciler>,
    config: Config,
    hooks: Arc<dyn Hooks>,
    process_id: String,
    ttl_us: i64,
    /// How long the process row must have been live before a beat settles it (the warm-up).
    settle_after_us: i64,
    cutoff_us: i64,
    sql: Arc<Statements>,
    local: Mutex<Local>,
    /// The wait before this process's first claim.
    warm_up: Mutex<WarmUp>,
    ticking: Mutex<()>,
    /// While `run` runs: wakes its liveness watcher when the local deadline moves.
    watch: Mutex<Option<Sender<()>>>,
    /// The one place the reconciler is told anything, in decision order.
    outbox: Outbox,
    /// Whether `run` is running (one at a time).
    running: AtomicBool,
    /// When the run loop's database call in progress began: a [`Running`](super::Running)'s stop
    /// bound counts from there.
    busy: Busy,
    /// Whether the run loop's statements reach the database: back from an outage, its ticks claim,
    /// shed and sweep nothing for one heartbeat interval ([`Leaser::defers`]).
    reach: Mutex<Reach>,
    /// The last tick's read took longer than a heartbeat interval ([`Leaser::reached`]).
    late: AtomicBool,
}

impl Leaser {
    /// A leaser for one process, on the default tables, observed by no hooks (attach them with
    /// [`Leaser::with_hooks`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the configuration is invalid:
    /// a zero duration or claim size, a heartbeat interval not below four fifths of the TTL, a sweep
    /// cutoff not above it, a negative or non-finite hysteresis, a process id that is not a UUID, a
    /// blank or NUL-carrying hostname or version.
    pub fn new(db: &Db, reconciler: Arc<dyn Reconciler>, config: Config) -> Result<Leaser> {
        let config = config.validated()?;
        let process_id = config.process_id.clone().expect("validated");
        let warm_up = Mutex::new(WarmUp::new(
            config.warm_up_wait(),
            config.probation(),
            config.warm_up_most(),
        ));
        Ok(Leaser {
            db: db.clone(),
            reconciler,
            ttl_us: micros("membership ttl", config.ttl, MIN_DURATION)?,
            cutoff_us: micros("sweep cutoff", config.sweep_cutoff, MIN_DURATION)?,
            settle_after_us: micros("warm-up", config.warm_up_wait(), Duration::ZERO)?,
            config,
            hooks: Arc::new(NoHooks),
            process_id,
            sql: Statements::default_tables(),
            local: Mutex::new(Local::default()),
            warm_up,
            ticking: Mutex::new(()),
            watch: Mutex::new(None),
            outbox: Outbox::default(),
            running: AtomicBool::new(false),
            busy: Busy::default(),
            reach: Mutex::new(Reach::default()),
            late: AtomicBool::new(false),
        })
    }

    /// Observes this leaser's ticks, heartbeats and sweeps with `hooks`. Defaults to
    /// [`NoHooks`](super::NoHooks).
    pub fn with_hooks(mut self, hooks: Arc<dyn Hooks>) -> Leaser {
        self.hooks = hooks;
        self
    }

    /// Uses other tables (each `table` or `schema.table`), the same as the fleet's [`Units`](super::Units).
    /// Defaults to `pgtenure_processes` and `pgtenure_units`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier, or the two tables (or the units table's derived index names) collide.
    pub fn with_tables(mut self, processes: &str, units: &str) -> Result<Leaser> {
        self.sql = Statements::new(TableName::parse(processes)?, TableName::parse(units)?)?;
        Ok(self)
    }

    /// This process's id (UUID text).
    pub fn process_id(&self) -> &str {
        &self.process_id
    }

    /// Delivers what was decided to the reconciler. Its calls are the application's code, not a
    /// database call: a [`Running`](super::Running)'s stop bound does not count them.
    pub(super) fn deliver(&self) {
        let _paused = self.busy.pause();
        self.outbox.flush(&*self.reconciler);
    }

    /// The configuration in force (defaults filled in).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The units this process owns, as of its last tick; empty once its local liveness deadline
    /// ([`Leaser::live_until`]: the instant before the last successful heartbeat, plus four fifths
    /// of the TTL) has passed, since soon after that another process may own them.
    pub fn owned(&self) -> Vec<Unit> {
        let local = self.local.lock();
        if !local.live_at(Instant::now()) {
            return Vec::new();
        }
        local.owned_units()
    }

    /// The fencing token of this process's claim of `unit`, while it owns it (as [`Leaser::owned`]
    /// does): every claim of a unit draws a larger token, so a write stamped with it can be refused
    /// downstream once a later owner's writes arrive. See [`Leaser::fence`].
    pub fn token(&self, unit: &Unit) -> Option<i64> {
        let local = self.local.lock();
        if !local.live_at(Instant::now()) {
            return None;
        }
        local.token(unit)
    }

    /// Checks, inside your transaction `tx`, that this process still owns `unit` with the token of
    /// its claim ([`Leaser::token`]) and is live by the database clock now (`clock_timestamp()`),
    /// and locks the unit's row `FOR SHARE` until `tx` ends: no other process can claim the unit
    /// before the write commits (a claimer skips a locked unit and takes it later). Write only when
    /// it returns `true`. A process paused past its TTL, whose units moved meanwhile, gets `false`.
    ///
    /// Returns `false` without a statement when this process does not own `unit` by its own
    /// account (the local view, or its liveness deadline passed). Keep fenced transactions short:
    /// while one is open, this process's give-back of the unit (and the sweep, if the process dies)
    /// skips the unit and comes back to it later. Fence in the transaction that commits the write,
    /// not inside a savepoint that may be rolled back: rolling back to a savepoint taken before the
    /// fence releases its lock.
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>, unit: &Unit) -> Result<bool> {
        match self.fence_statement(unit) {
            Some(fence) => fence.check(tx),
            None => Ok(false),
        }
    }

    /// The fence of this process's claim of `unit` as a value: the statement and its parameters
    /// (process id, tenant, shard, the claim's token), for any driver to run inside its own
    /// transaction ([`crate::fence`]); `None` when this process does not own `unit` by its own
    /// account (as [`Leaser::token`]). [`Leaser::fence`] runs it.
    ///
    /// The value is pinned to the claim: taken when work on the unit begins, it keeps refusing
    /// after the unit moved, even once this process claims it again (under a newer token).
    pub fn fence_statement(&self, unit: &Unit) -> Option<Fence> {
        let token = self.token(unit)?;
        Some(self.sql.fence(&self.process_id, unit, token))
    }

    /// The local liveness deadline, if a heartbeat has succeeded: the instant before it was sent,
    /// plus four fifths of the TTL. A fifth of the TTL before the database's expiry of the process
    /// row, so the reconciler hears of the loss before another process may claim the units, even
    /// while it is still busy with an earlier callback (keep callbacks shorter than that).
    pub fn live_until(&self) -> Option<Instant> {
        self.local.lock().live_until()
    }

    /// True once a tick has succeeded.
    pub fn ready(&self) -> bool {
        self.local.lock().ready()
    }

    /// Upserts the process row with `now() + ttl` and the owned count and weight: the only
    /// steady-state write of a process, and moves the local liveness deadline. If the row had expired
    /// since the previous heartbeat (by the database clock, or its answer came after the previous
    /// beat's local deadline), other processes may have claimed its units: every owned unit is reported lost and forgotten, and the
    /// next tick (at once, in `run`) re-reads what the database says it still owns.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn heartbeat(&self) -> Result<()> {
        self.beat().map(drop)
    }

    /// [`Leaser::heartbeat`], answering whether the row had lapsed (not at the first beat).
    pub(super) fn beat(&self) -> Result<bool> {
        let (reported, known) = {
            let local = self.local.lock();
            (local.reported(), local.knows_its_units())
        };
        let sent = Instant::now();
        let beat = self.sql.heartbeat(
            &self.db,
            &Heartbeat {
                process: &self.process_id,
                ttl_us: self.ttl_us,
                reported,
                known,
                hostname: &self.config.hostname,
                version: &self.config.version,
                settled: !self.config.probation(),
                settle_after_us: self.settle_after_us,
            },
        );
        observe::heartbeat(beat.is_ok());
        let beat = beat?;
        let stop = stop_after(self.config.ttl);
        let warn = {
            let mut local = self.local.lock();
            match local.beat_answered(beat, sent + stop, Instant::now()) {
                Some(Lapse { lost, first }) => {
                    self.outbox.push(Delivery::Lost(lost, UnitLoss::Expired));
                    !first
                }
                None => false,
            }
        };
        if warn {
            log::warn!(
                target: "pgtenure::membership",
                "process {} heartbeat came after its row expired; its units may be elsewhere now",
                self.process_id
            );
        }
        self.deliver();
        if let Some(watch) = self.watch.lock().as_ref() {
            // A full channel already holds a wake-up; the watcher re-reads the deadline anyway.
            let _ = watch.try_send(());
        }
        Ok(warn)
    }

    /// The run loop's statement was answered (`lapsed`: a heartbeat that found the row had lapsed;
    /// `sent`: when a tick's read was sent). A lapse, or a tick's read that took longer than a
    /// heartbeat interval, says this process was cut off from the database, as a failure does
    /// ([`Leaser::unreached`]): then its ticks claim, shed and sweep nothing for one heartbeat
    /// interval. A run of late reads is one return: the first defers, the next are the database's
    /// pace (deferring at each would never end: a process on a link that slow would never claim).
    pub(super) fn reached(&self, sent: Option<Instant>, lapsed: bool) {
        let (now, period) = (Instant::now(), self.config.heartbeat_interval);
        let first_late = sent.is_some_and(|sent| {
            let late = now.saturating_duration_since(sent) > period;
            let was_late = self.late.swap(late, Ordering::AcqRel);
            late && !was_late
        });
        let mut reach = self.reach.lock();
        if lapsed || first_late {
            reach.returned(now, period);
        } else {
            reach.answered(now, period);
        }
    }

    /// The run loop's statement failed with `error`: a connection error or a timeout cuts this
    /// process off until a statement is answered, and one heartbeat interval beyond.
    pub(super) fn unreached(&self, error: &Error) {
        let period = self.config.heartbeat_interval;
        self.reach.lock().failed(error, Instant::now(), period);
    }

    /// Until when this process, back from an outage, leaves alone the units of processes that
    /// lapsed meanwhile: it claims none (they are the units of processes that reach the database
    /// again within the deferral, and take them back at once), sheds none and sweeps nothing, so
    /// that it does not act on a fleet that is only late to return. `None` when it was not cut off,
    /// or the deferral (one heartbeat interval after its first answer) has passed. Only delays:
    /// a process that really crashed loses its units one heartbeat interval later.
    pub(super) fn defers(&self) -> Option<Instant> {
        self.reach.lock().defers(Instant::now())
    }

    /// Past the local liveness deadline without a new heartbeat: report every owned unit lost.
    pub(super) fn expire_if_due(&self) {
        {
            let mut local = self.local.lock();
            if local.live_at(Instant::now()) {
                return;
            }
            let lost = local.forget_all();
            if !lost.is_empty() {
                log::warn!(
                    target: "pgtenure::membership",
                    "process {} missed its heartbeats past its TTL: stopping work on {} units",
                    self.process_id,
                    lost.len()
                );
            }
            self.outbox.push(Delivery::Lost(lost, UnitLoss::Expired));
        }
        self.deliver();
    }

    /// Deletes process rows expired for longer than the sweep cutoff and frees their units, in one
    /// statement.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn sweep(&self) -> Result<Sweep> {
        self.sweep_until(None)
    }

    /// [`Leaser::sweep`], waiting for a pool connection until `until` at most (the run loop's:
    /// a sweep must not wait out an outage and then free the units of processes only late to
    /// return).
    pub(super) fn sweep_until(&self, until: Option<Instant>) -> Result<Sweep> {
        let swept = self.sql.sweep(&self.db, self.cutoff_us, until)?;
        let sweep = Sweep {
            processes: swept.processes,
            units: swept.units,
        };
        if sweep.processes > 0 {
            log::info!(
                target: "pgtenure::membership",
                "swept {} expired processes and freed {} units",
                sweep.processes,
                sweep.units
            );
        }
        Ok(sweep)
    }

    /// Reports every owned unit lost to the [`Reconciler`] as [`UnitLoss::Released`] (and waits for `units_lost` to return:
    /// drain the work there), then gives every unit of this process back in one statement, so the
    /// others claim them at their next tick. Returns the units the database released. A shutdown
    /// step: call it once [`Leaser::run`] has returned (a tick that runs meanwhile keeps, and is
    /// told it gained, whatever it adopts).
    ///
    /// # Errors
    ///
    /// A database or connection error; the units then become claimable when the row expires (the
    /// reconciler was told already).
    pub fn release(&self) -> Result<Vec<Unit>> {
        self.tell_everything_lost();
        let _one_at_a_time = self.ticking.lock();
        let (keep, reported) = {
            let local = self.local.lock();
            let keep = local.kept_at_release(|message| self.outbox.told(message));
            (keep, local.reported())
        };
        self.sql
            .release(&self.db, &self.process_id, &Batch::of(&keep), reported)
    }

    /// Removes the process row (the last step of a graceful shutdown), freeing any unit it still
    /// owns, so live-process counts drop at once. Like [`Leaser::release`], it first reports every
    /// owned unit lost and waits for the [`Reconciler`].
    ///
    /// # Errors
    ///
    /// A database or connection error; [`ErrorKind::InvalidInput`] when another thread keeps
    /// ticking and adopting units meanwhile (stop [`Leaser::run`] first).
    pub fn delete_process(&self) -> Result<()> {
        // A tick that runs meanwhile (it should not: call this once `run` has returned) may adopt
        // units again after they were told lost: tell again, until nothing is owned at the delete.
        for _ in 0..MAX_FAREWELLS {
            self.tell_everything_lost();
            let _one_at_a_time = self.ticking.lock();
            if self
                .local
                .lock()
                .owns_any(|message| self.outbox.told(message))
            {
                continue;
            }
            self.sql.delete_process(&self.db, &self.process_id)?;
            self.local.lock().left();
            drop(_one_at_a_time);
            // Whatever a concurrent tick queued meanwhile.
            self.deliver();
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "process {} keeps adopting units while its row is being deleted: stop `run` and \
                 other ticks first",
                self.process_id
            ),
        ))
    }

    /// Forgets every owned unit (the next tick re-reads) and tells the reconciler, outside the
    /// tick's lock.
    fn tell_everything_lost(&self) {
        {
            let _one_at_a_time = self.ticking.lock();
            let mut local = self.local.lock();
            let lost = local.forget_all();
            self.outbox.push(Delivery::Lost(lost, UnitLoss::Released));
        }
        self.deliver();
    }
}

/// The parts the rebalance step (`tick.rs`) and the run loop (`run.rs`) work with. The state with
/// invariants keeps them itself: [`Local`] behind its methods, the warm-up, the outbox, the busy
/// mark; the rest is set once, at construction.
impl Leaser {
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    pub(super) fn sql(&self) -> &Statements {
        &self.sql
    }

    pub(super) fn reconciler(&self) -> &dyn Reconciler {
        &*self.reconciler
    }

    pub(super) fn hooks(&self) -> &dyn Hooks {
        &*self.hooks
    }

    /// The local state, locked; never held while waiting for [`Leaser::one_tick_at_a_time`].
    pub(super) fn local(&self) -> MutexGuard<'_, Local> {
        self.local.lock()
    }

    /// The wait before this process's first claim, locked.
    pub(super) fn warm_up(&self) -> MutexGuard<'_, WarmUp> {
        self.warm_up.lock()
    }

    /// Serializes ticks (and the shutdown steps that must not run within one).
    pub(super) fn one_tick_at_a_time(&self) -> MutexGuard<'_, ()> {
        self.ticking.lock()
    }

    /// The one place the reconciler is told anything, in decision order.
    pub(super) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// When the run loop's database call in progress began.
    pub(super) fn busy(&self) -> &Busy {
        &self.busy
    }

    /// Whether `run` is running.
    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Marks the loop running, or refuses a second one.
    pub(super) fn claim_loop(&self) -> Result<()> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(Error::invalid_input(format!(
                "process {}: run is already running for this leaser; one loop per leaser",
                self.process_id
            )));
        }
        Ok(())
    }

    /// Marks the loop stopped.
    pub(super) fn loop_ended(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// While `run` runs, `wake` hears whenever the local deadline moves; `None` once it stops.
    pub(super) fn watch_deadline(&self, wake: Option<Sender<()>>) {
        *self.watch.lock() = wake;
    }
}

impl fmt::Debug for Leaser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let local = self.local.lock();
        f.debug_struct("Leaser")
            .field("process_id", &self.process_id)
            .field("processes", &self.sql.processes)
            .field("units", &self.sql.units)
            .field("owned", &local.owned_count())
            .field("ready", &local.ready())
            .field("config", &self.config)
            .finish()
    }
}
