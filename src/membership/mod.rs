//! Membership: process heartbeats and fair-share ownership of (tenant, shard) units.
//!
//! Each process of a fleet runs a [`Leaser`]. It keeps one row for the process alive with
//! [`Leaser::heartbeat`] (its only steady-state write) and, at each [`Leaser::tick`], claims units
//! until it owns its fair share of the total weight among live processes, or sheds units when it owns
//! well above it. A unit's owner is live while its process row is live, so holding units costs no
//! writes; when a process stops heartbeating, its units become claimable once its TTL has passed by
//! the database clock.
//!
//! A [`Reconciler`] is told which units were lost and gained (lost first, so work can stop before new
//! work starts) and says which units have work in flight, so shedding prefers idle units. Drive the
//! steps by hand in tests, or call [`Leaser::run`] on a thread of your own in production. (A
//! [`Leaser::tick`] is one such rebalance step; the ticks of [`TickClaims`](crate::TickClaims) are
//! something else, the scheduled instants of a recurring job.)
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::sync::Arc;
//! use pgtenure::membership::{Config, Hooks, Leaser, Reconciler, Unit, Units};
//! use pgtenure::Db;
//!
//! struct Pollers;
//! impl Reconciler for Pollers {
//!     fn units_gained(&self, units: &[Unit]) { /* start polling these */ }
//!     fn units_lost(&self, units: &[Unit]) { /* stop polling these */ }
//! }
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let units = Units::new(&db);
//! units.create_tables()?;
//! units.add(&[Unit::new("acme", 0)?, Unit::new("acme", 1)?])?;
//!
//! let leaser = Arc::new(Leaser::new(&db, Arc::new(Pollers), Config::default(), Hooks::default())?);
//! let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
//! let runner = {
//!     let leaser = leaser.clone();
//!     std::thread::spawn(move || leaser.run(&shutdown))
//! };
//! // ... at shutdown:
//! drop(stop);
//! runner.join().expect("runner thread")?;
//! leaser.release()?; // hand the units over now
//! leaser.delete_process()?;
//! # Ok(())
//! # }
//! ```

mod deliver;
mod fair;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, at, bounded, never, select, Receiver, Sender};
use parking_lot::Mutex;
use postgres::types::Type;
use postgres::Row;

use self::deliver::{Delivery, Outbox};
use self::fair::{choose_shed, Facts, Held, Member, Step};
use crate::db::{Companion, Db, Policy};
use crate::error::{Error, Result};
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::{hostname, random_u64};
use crate::statement::Statement;
use crate::table_name::{render_tables, TableName};

/// The processes table unless [`Leaser::with_tables`] names another.
pub const DEFAULT_PROCESSES_TABLE: &str = "pgtenure_processes";
/// The units table unless [`Leaser::with_tables`] names another.
pub const DEFAULT_UNITS_TABLE: &str = "pgtenure_units";

const CREATE_PROCESSES: &str = include_str!("../../sql/membership/create_processes.sql");
const CREATE_UNITS: &str = include_str!("../../sql/membership/create_units.sql");
const CREATE_OWNER_INDEX: &str = include_str!("../../sql/membership/create_owner_index.sql");
const CREATE_CLAIMABLE_INDEX: &str =
    include_str!("../../sql/membership/create_claimable_index.sql");
const HEARTBEAT: &str = include_str!("../../sql/membership/heartbeat.sql");
const OWNED: &str = include_str!("../../sql/membership/owned.sql");
const STATS: &str = include_str!("../../sql/membership/stats.sql");
const CLAIM: &str = include_str!("../../sql/membership/claim.sql");
const SHED: &str = include_str!("../../sql/membership/shed.sql");
const RELEASE: &str = include_str!("../../sql/membership/release.sql");
const DELETE_PROCESS: &str = include_str!("../../sql/membership/delete_process.sql");
const SWEEP: &str = include_str!("../../sql/membership/sweep.sql");
const ADD_UNITS: &str = include_str!("../../sql/membership/add_units.sql");
const REMOVE_UNITS: &str = include_str!("../../sql/membership/remove_units.sql");
const SET_WEIGHT: &str = include_str!("../../sql/membership/set_weight.sql");

/// First and longest wait between heartbeats while `run` waits for the database at startup.
const STARTUP_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// One unit of work: a shard of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unit {
    /// The tenant: not blank, no NUL byte, at most 1,024 bytes (checked before any statement).
    pub tenant: String,
    /// The shard.
    pub shard: i32,
}

impl Unit {
    /// A unit, with the tenant checked.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the tenant is blank,
    /// contains a NUL byte or is longer than 1,024 bytes.
    pub fn new(tenant: &str, shard: i32) -> Result<Unit> {
        check_key("tenant", tenant)?;
        Ok(Unit {
            tenant: tenant.to_owned(),
            shard,
        })
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.shard)
    }
}

/// What a [`Leaser`] drives as ownership changes.
///
/// Every call comes from one delivery point, one at a time, in the order the leaser decided (see
/// `deliver.rs`): a loss is never overtaken by an older gain. Calls run on the leaser's threads (the
/// one that ticked, heartbeat or watched the deadline), outside its locks, so a callback may call
/// back into the leaser. Later messages wait for a call in progress, so keep each call shorter than
/// a fifth of the TTL: a unit to shed is given back only once `units_lost` returned, and at the local
/// deadline the loss must reach the application before the database lets another process claim.
///
/// That last message comes from a thread, which a starved machine may run late. Work that must never
/// overlap another process's should also check [`Leaser::owned`] or [`Leaser::live_until`] (which
/// follow the clock, as [`Lease::is_held`](crate::Lease::is_held) does) before each step, and fence
/// its writes.
pub trait Reconciler: Send + Sync {
    /// These units are now this process's: start their work.
    fn units_gained(&self, units: &[Unit]);
    /// These units are no longer this process's (chosen to shed, released elsewhere, claimed by
    /// another after this process's row expired, or removed), or may not be (the local liveness
    /// deadline passed): stop their work before returning. Called before `units_gained` in a tick. A
    /// unit chosen to shed stays this process's in the database until this call has returned.
    fn units_lost(&self, units: &[Unit]);
    /// How many deliveries of `unit` are in flight; shedding skips units with work in flight.
    /// Defaults to 0.
    fn in_flight(&self, unit: &Unit) -> usize {
        let _ = unit;
        0
    }
}

/// A [`Leaser`]'s timing and claim sizing. Zero values take the defaults.
///
/// Build it from `Config::default()` and set the fields you need.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Stored in the process row once, for operators. Defaults to this machine's host name.
    pub hostname: String,
    /// Stored in the process row once, for operators. Defaults to `"unknown"`.
    pub version: String,
    /// The process id, UUID text; `None` draws a random one. Defaults to `None`.
    pub process_id: Option<String>,
    /// How long a process row stays live after a heartbeat. Defaults to 15 s.
    pub ttl: Duration,
    /// How often `run` heartbeats; must be below four fifths of `ttl` (a process stops acting on its
    /// units four fifths of the TTL after its last successful heartbeat). Defaults to 5 s.
    pub heartbeat_interval: Duration,
    /// How often `run` rebalances (ticks). Defaults to 5 s.
    pub rebalance_interval: Duration,
    /// How often `run` sweeps long-expired process rows. Defaults to 10 minutes.
    pub sweep_interval: Duration,
    /// How long a process row must have been expired before a sweep deletes it; must exceed `ttl`.
    /// Defaults to 1 hour.
    pub sweep_cutoff: Duration,
    /// Ignored: balance is exact (see [`Leaser::tick`]), so there is no band to tolerate. A band
    /// around the fair share never settled when shares were small. Still checked (finite, at least
    /// 0) so that configurations keep their meaning until the field is removed. Defaults to 0.2.
    #[deprecated(note = "ignored: membership balance is exact; the field will be removed")]
    pub shed_hysteresis: f64,
    /// The most units one claim statement takes; clamped to `max_claim_per_tick`. Defaults to 64.
    pub claim_batch: u32,
    /// The most units (by weight) one tick claims. Defaults to 1,024.
    pub max_claim_per_tick: u32,
}

impl Default for Config {
    #[allow(deprecated)]
    fn default() -> Config {
        Config {
            hostname: hostname(),
            version: "unknown".to_owned(),
            process_id: None,
            ttl: Duration::from_secs(15),
            heartbeat_interval: Duration::from_secs(5),
            rebalance_interval: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(600),
            sweep_cutoff: Duration::from_secs(3600),
            shed_hysteresis: 0.2,
            claim_batch: 64,
            max_claim_per_tick: 1024,
        }
    }
}

impl Config {
    /// Replaces zero values with the defaults and checks the rest.
    #[allow(deprecated)]
    fn normalized(mut self) -> Result<Config> {
        let defaults = Config::default();
        let or_default =
            |value: Duration, default: Duration| if value.is_zero() { default } else { value };
        self.ttl = or_default(self.ttl, defaults.ttl);
        self.heartbeat_interval = or_default(self.heartbeat_interval, defaults.heartbeat_interval);
        self.rebalance_interval = or_default(self.rebalance_interval, defaults.rebalance_interval);
        self.sweep_interval = or_default(self.sweep_interval, defaults.sweep_interval);
        self.sweep_cutoff = or_default(self.sweep_cutoff, defaults.sweep_cutoff);
        if self.max_claim_per_tick == 0 {
            self.max_claim_per_tick = defaults.max_claim_per_tick;
        }
        if self.claim_batch == 0 {
            self.claim_batch = defaults.claim_batch;
        }
        self.claim_batch = self.claim_batch.min(self.max_claim_per_tick);
        if self.hostname.trim().is_empty() {
            self.hostname = defaults.hostname;
        }
        if self.version.trim().is_empty() {
            self.version = defaults.version;
        }
        check_key("hostname", &self.hostname)?;
        check_key("version", &self.version)?;
        micros("membership ttl", self.ttl, MIN_DURATION)?;
        micros("sweep cutoff", self.sweep_cutoff, MIN_DURATION)?;
        if self.heartbeat_interval >= stop_after(self.ttl) {
            return Err(Error::invalid_input(format!(
                "heartbeat interval {:?} is not below four fifths of the TTL {:?}; a process would \
                 stop working on its units between beats",
                self.heartbeat_interval, self.ttl
            )));
        }
        if self.sweep_cutoff <= self.ttl {
            return Err(Error::invalid_input(format!(
                "sweep cutoff {:?} is not above the TTL {:?}; live but late processes would be swept",
                self.sweep_cutoff, self.ttl
            )));
        }
        if !self.shed_hysteresis.is_finite() || self.shed_hysteresis < 0.0 {
            return Err(Error::invalid_input(format!(
                "shed hysteresis {} must be a finite number at least 0",
                self.shed_hysteresis
            )));
        }
        if self.max_claim_per_tick > i32::MAX as u32 {
            return Err(Error::invalid_input("max_claim_per_tick is above 2^31 - 1"));
        }
        self.process_id = Some(match self.process_id.take() {
            Some(id) => parse_uuid(&id)?,
            None => random_uuid(),
        });
        Ok(self)
    }
}

/// Optional observers for metrics; `None` is skipped.
#[derive(Default)]
pub struct Hooks {
    /// Units claimed by a tick (called when it claimed any).
    pub claimed: Option<Box<dyn Fn(usize) + Send + Sync>>,
    /// Units shed by a tick (called when it shed any).
    pub shed: Option<Box<dyn Fn(usize) + Send + Sync>>,
    /// How long a tick took (every successful tick).
    pub rebalanced: Option<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Units and weight owned after a tick (every successful tick).
    pub owned: Option<Box<dyn Fn(usize, i64) + Send + Sync>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("claimed", &self.claimed.is_some())
            .field("shed", &self.shed.is_some())
            .field("rebalanced", &self.rebalanced.is_some())
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

/// What one [`Leaser::tick`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rebalance {
    /// Units reported to [`Reconciler::units_lost`].
    pub lost: Vec<Unit>,
    /// Units reported to [`Reconciler::units_gained`].
    pub gained: Vec<Unit>,
    /// Units this tick claimed.
    pub claimed: usize,
    /// Units this tick gave back in the database (shed). A unit chosen to shed is reported lost
    /// first and given back right after that delivery, in the same tick.
    pub shed: usize,
    /// Units owned after the tick.
    pub owned: usize,
    /// Weight owned after the tick.
    pub owned_weight: i64,
    /// The fair share of weight this tick aimed at.
    pub fair_share: i64,
    /// Live processes, by the database clock.
    pub live_processes: i64,
    /// Whether this process's own row was live (a process that is not live claims and sheds nothing).
    pub live: bool,
}

/// How many process rows and units a [`Leaser::sweep`] removed and freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Process rows deleted.
    pub processes: u64,
    /// Units freed.
    pub units: u64,
}

struct Statements {
    processes: TableName,
    units: TableName,
    create_processes: [String; 1],
    create_units: [String; 3],
    heartbeat: Statement,
    owned: Statement,
    stats: Statement,
    claim: Statement,
    shed: Statement,
    release: Statement,
    delete_process: Statement,
    sweep: Statement,
    add_units: Statement,
    remove_units: Statement,
    set_weight: Statement,
}

/// The suffixes of the units table's indexes (`{index:owner}`, `{index:claimable}` in `sql/`).
const UNIT_INDEXES: [&str; 2] = ["owner", "claimable"];

impl Statements {
    /// Renders the statements for two tables, refusing names that would collide: the units table's
    /// index names are derived from its name, and `CREATE INDEX IF NOT EXISTS` would silently skip
    /// an index whose name the processes table already has.
    fn new(processes: TableName, units: TableName) -> Result<Arc<Statements>> {
        if processes == units {
            return Err(Error::invalid_input(format!(
                "the processes and units tables are both named {units}; give them different names"
            )));
        }
        for suffix in UNIT_INDEXES {
            if units.derived(suffix) == processes.quoted()
                || units.derived_unqualified(suffix) == processes.quoted()
            {
                return Err(Error::invalid_input(format!(
                    "the units table {units} names its {suffix} index {}, which is the processes \
                     table's name; choose other table names",
                    units.derived_unqualified(suffix)
                )));
            }
        }
        Ok(Statements::render(processes, units))
    }

    fn render(processes: TableName, units: TableName) -> Arc<Statements> {
        let both = [("units", &units), ("processes", &processes)];
        let dml = |sql: &str, types: &[Type]| Statement::new(render_tables(sql, &both), types);
        let on = |sql: &str, table: &TableName| render_tables(sql, &[("table", table)]);
        let units_batch = [Type::TEXT_ARRAY, Type::INT4_ARRAY];
        Arc::new(Statements {
            create_processes: [on(CREATE_PROCESSES, &processes)],
            create_units: [
                on(CREATE_UNITS, &units),
                on(CREATE_OWNER_INDEX, &units),
                on(CREATE_CLAIMABLE_INDEX, &units),
            ],
            heartbeat: dml(
                HEARTBEAT,
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                ],
            ),
            owned: dml(OWNED, &[Type::TEXT]),
            stats: dml(STATS, &[Type::TEXT]),
            claim: dml(
                CLAIM,
                &[
                    Type::TEXT,
                    Type::INT4,
                    Type::INT8,
                    Type::INT4,
                    Type::INT4,
                    Type::INT8,
                ],
            ),
            shed: dml(
                SHED,
                &[
                    Type::TEXT,
                    Type::TEXT_ARRAY,
                    Type::INT4_ARRAY,
                    Type::INT4,
                    Type::INT8,
                ],
            ),
            release: dml(RELEASE, &[Type::TEXT]),
            delete_process: dml(DELETE_PROCESS, &[Type::TEXT]),
            sweep: dml(SWEEP, &[Type::INT8]),
            add_units: dml(ADD_UNITS, &units_batch),
            remove_units: dml(REMOVE_UNITS, &units_batch),
            set_weight: dml(SET_WEIGHT, &[Type::TEXT, Type::INT4, Type::INT4]),
            processes,
            units,
        })
    }

    fn default_tables() -> Arc<Statements> {
        Statements::render(
            TableName::parse(DEFAULT_PROCESSES_TABLE).expect("the default table name is valid"),
            TableName::parse(DEFAULT_UNITS_TABLE).expect("the default table name is valid"),
        )
    }

    fn create_tables(&self, db: &Db) -> Result<()> {
        db.create_table(
            "create processes table",
            &self.processes,
            &self.create_processes,
            &[],
        )?;
        let indexes = UNIT_INDEXES.map(|suffix| Companion::index(self.units.derived(suffix)));
        db.create_table(
            "create units table",
            &self.units,
            &self.create_units,
            &indexes,
        )
    }
}

/// Registers the units a fleet shares and sets their weights.
///
/// Cheap to clone, `Send` and `Sync`.
#[derive(Clone)]
pub struct Units {
    db: Db,
    sql: Arc<Statements>,
}

impl Units {
    /// Units in `pgtenure_units`, processes in `pgtenure_processes`.
    pub fn new(db: &Db) -> Units {
        Units {
            db: db.clone(),
            sql: Statements::default_tables(),
        }
    }

    /// Uses other tables (each `table` or `schema.table`); use the same on every [`Leaser`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier.
    pub fn with_tables(mut self, processes: &str, units: &str) -> Result<Units> {
        self.sql = Statements::new(TableName::parse(processes)?, TableName::parse(units)?)?;
        Ok(self)
    }

    /// Creates both tables and the units' indexes unless they exist; safe from every instance at once.
    ///
    /// # Errors
    ///
    /// A database or connection error; creating needs `CREATE` on the schema.
    pub fn create_tables(&self) -> Result<()> {
        self.sql.create_tables(&self.db)
    }

    /// Registers units with weight 1 (one statement for the batch); existing units are left as they
    /// are. Returns how many were new.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when a
    /// tenant is bad; otherwise a database or connection error.
    pub fn add(&self, units: &[Unit]) -> Result<u64> {
        self.batch("add units", &self.sql.add_units, units)
    }

    /// Unregisters units (one statement); an owner learns it at its next tick. Returns how many
    /// existed.
    ///
    /// # Errors
    ///
    /// As [`Units::add`].
    pub fn remove(&self, units: &[Unit]) -> Result<u64> {
        self.batch("remove units", &self.sql.remove_units, units)
    }

    fn batch(&self, context: &str, sql: &Statement, units: &[Unit]) -> Result<u64> {
        for unit in units {
            check_key("tenant", &unit.tenant)?;
        }
        if units.is_empty() {
            return Ok(0);
        }
        let tenants: Vec<&str> = units.iter().map(|u| u.tenant.as_str()).collect();
        let shards: Vec<i32> = units.iter().map(|u| u.shard).collect();
        let row = self
            .db
            .query_one(context, Policy::ONCE, sql, &[&tenants, &shards])?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or_default())
    }

    /// Sets a unit's weight: its share of a process's fair share. 0 disables it: it is never claimed,
    /// and its owner gives it back at its next tick. Returns whether the unit exists.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, for a
    /// negative weight or a bad tenant; otherwise a database or connection error.
    pub fn set_weight(&self, unit: &Unit, weight: i32) -> Result<bool> {
        check_key("tenant", &unit.tenant)?;
        if weight < 0 {
            return Err(Error::invalid_input(format!(
                "weight {weight} of unit {unit} is negative; use 0 to disable a unit"
            )));
        }
        let rows = self.db.query(
            "set unit weight",
            Policy::ONCE,
            &self.sql.set_weight,
            &[&unit.tenant.as_str(), &unit.shard, &weight],
        )?;
        Ok(!rows.is_empty())
    }
}

impl fmt::Debug for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Units")
            .field("processes", &self.sql.processes)
            .field("units", &self.sql.units)
            .finish()
    }
}

#[derive(Default)]
struct Local {
    /// Shared with a running tick, which copies it only if it changes something (copy on write).
    owned: Arc<BTreeMap<Unit, i32>>,
    /// The total weight of `owned`, kept with it.
    owned_weight: i64,
    /// Bumped whenever ownership is forgotten, so a tick that started before does not adopt its view.
    generation: u64,
    ready: bool,
    reread: bool,
    last_beat: Option<Instant>,
    /// The local liveness deadline: the instant before the last successful heartbeat was sent, plus
    /// four fifths of the TTL (see [`stop_after`]). It falls a fifth of the TTL before the database's
    /// expiry of the row, so past it this process must not act on its units, and its reconciler hears
    /// so before another process may claim them.
    live_until: Option<Instant>,
    /// Units chosen to shed: the reconciler has been told they are lost, the database still says
    /// they are this process's until the shed statement commits. Never in `owned`, never re-read
    /// into it, and counted as owned in what the process row reports.
    shedding: BTreeMap<Unit, i32>,
    /// The process row's counter of changes others made to its units, when `owned` was last known
    /// to match the database: while it stays put, a tick need not re-read the units.
    seen_changes: Option<i64>,
}

/// How long after a heartbeat was sent a process acts on its units: four fifths of the TTL. The
/// last fifth is for telling the reconciler, which may be busy with an earlier callback, before the
/// database lets another process claim the units.
fn stop_after(ttl: Duration) -> Duration {
    ttl - ttl / 5
}

impl Local {
    fn live_at(&self, now: Instant) -> bool {
        self.live_until.is_some_and(|until| now < until)
    }

    /// Forgets every owned unit, returning them (to report as lost); the next tick re-reads.
    fn forget_all(&mut self) -> Vec<Unit> {
        self.reread = true;
        self.generation += 1;
        self.owned_weight = 0;
        self.shedding.clear();
        Arc::unwrap_or_clone(std::mem::take(&mut self.owned))
            .into_keys()
            .collect()
    }

    /// What the database says this process owns: its units and those it is shedding.
    fn reported(&self) -> (i32, i64) {
        let count = self.owned.len() + self.shedding.len();
        (count as i32, self.owned_weight + weight_of(&self.shedding))
    }
}

/// A process's membership: its heartbeat row and the units it owns; see the [module docs](self).
///
/// `Send` and `Sync`: share it in an `Arc` between the thread that calls [`Leaser::run`] and the
/// rest of the application. Ticks are serialized.
pub struct Leaser {
    db: Db,
    reconciler: Arc<dyn Reconciler>,
    config: Config,
    hooks: Hooks,
    process_id: String,
    ttl_us: i64,
    cutoff_us: i64,
    sql: Arc<Statements>,
    local: Mutex<Local>,
    ticking: Mutex<()>,
    /// While `run` runs: wakes its liveness watcher when the local deadline moves.
    watch: Mutex<Option<Sender<()>>>,
    /// The one place the reconciler is told anything, in decision order.
    outbox: Outbox,
}

impl Leaser {
    /// A leaser for one process, on the default tables.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the configuration is invalid:
    /// a heartbeat interval not below the TTL, a sweep cutoff not above it, a negative or non-finite
    /// hysteresis, a process id that is not a UUID, a bad hostname or version.
    pub fn new(
        db: &Db,
        reconciler: Arc<dyn Reconciler>,
        config: Config,
        hooks: Hooks,
    ) -> Result<Leaser> {
        let config = config.normalized()?;
        let process_id = config.process_id.clone().expect("normalized");
        Ok(Leaser {
            db: db.clone(),
            reconciler,
            ttl_us: micros("membership ttl", config.ttl, MIN_DURATION)?,
            cutoff_us: micros("sweep cutoff", config.sweep_cutoff, MIN_DURATION)?,
            config,
            hooks,
            process_id,
            sql: Statements::default_tables(),
            local: Mutex::new(Local::default()),
            ticking: Mutex::new(()),
            watch: Mutex::new(None),
            outbox: Outbox::default(),
        })
    }

    /// Uses other tables (each `table` or `schema.table`), the same as the fleet's [`Units`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier.
    pub fn with_tables(mut self, processes: &str, units: &str) -> Result<Leaser> {
        self.sql = Statements::new(TableName::parse(processes)?, TableName::parse(units)?)?;
        Ok(self)
    }

    /// This process's id (UUID text).
    pub fn process_id(&self) -> &str {
        &self.process_id
    }

    /// The configuration in force (defaults filled in).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The units this process owns, as of its last tick; empty once its local liveness deadline (the
    /// instant before the last successful heartbeat, plus the TTL) has passed, since from then on
    /// another process may own them.
    pub fn owned(&self) -> Vec<Unit> {
        let local = self.local.lock();
        if !local.live_at(Instant::now()) {
            return Vec::new();
        }
        local.owned.keys().cloned().collect()
    }

    /// The local liveness deadline, if a heartbeat has succeeded: the instant before it was sent,
    /// plus four fifths of the TTL. A fifth of the TTL before the database's expiry of the process
    /// row, so the reconciler hears of the loss before another process may claim the units, even
    /// while it is still busy with an earlier callback (keep callbacks shorter than that).
    pub fn live_until(&self) -> Option<Instant> {
        self.local.lock().live_until
    }

    /// True once a tick has succeeded.
    pub fn ready(&self) -> bool {
        self.local.lock().ready
    }

    /// Upserts the process row with `now() + ttl` and the owned count and weight: the only
    /// steady-state write of a process, and moves the local liveness deadline. If the row had expired
    /// since the previous heartbeat (by the database clock, or more than a TTL passed locally), other
    /// processes may have claimed its units: every owned unit is reported lost and forgotten, and the
    /// next tick (at once, in `run`) re-reads what the database says it still owns.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn heartbeat(&self) -> Result<()> {
        let (count, weight, previous) = {
            let local = self.local.lock();
            let (count, weight) = local.reported();
            (count, weight, local.last_beat)
        };
        let sent = Instant::now();
        let row = self.db.query_one(
            "heartbeat",
            Policy::ONCE,
            &self.sql.heartbeat,
            &[
                &self.process_id.as_str(),
                &self.ttl_us,
                &count,
                &weight,
                &self.config.hostname.as_str(),
                &self.config.version.as_str(),
            ],
        )?;
        let lapsed: bool = row.get("lapsed");
        let stop = stop_after(self.config.ttl);
        let late = previous.is_some_and(|p| sent.duration_since(p) > stop);
        {
            let mut local = self.local.lock();
            local.last_beat = Some(sent);
            local.live_until = Some(sent + stop);
            if lapsed || late {
                local.reread = true;
                let lost = local.forget_all();
                self.outbox.push(Delivery::Lost(lost));
            }
        }
        if lapsed || late {
            log::warn!(
                target: "pgtenure::membership",
                "process {} heartbeat came after its row expired; its units may be elsewhere now",
                self.process_id
            );
        }
        self.outbox.flush(&*self.reconciler);
        if let Some(watch) = self.watch.lock().as_ref() {
            // A full channel already holds a wake-up; the watcher re-reads the deadline anyway.
            let _ = watch.try_send(());
        }
        Ok(())
    }

    /// Past the local liveness deadline without a new heartbeat: report every owned unit lost.
    fn expire_if_due(&self) {
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
            self.outbox.push(Delivery::Lost(lost));
        }
        self.outbox.flush(&*self.reconciler);
    }

    /// One rebalance step: reads the units the database says this process owns (replacing the local
    /// view), computes this process's target from the live processes and the claimable weight (see
    /// below), claims up to its deficit in batches, or (only when it claimed nothing) sheds what it
    /// owns above its target, lightest idle units first. Then reports lost units before gained ones
    /// to the [`Reconciler`], and calls the hooks. A process that is not live (its row expired by the
    /// database clock, or its local liveness deadline passed) claims and sheds nothing and owns
    /// nothing until a heartbeat makes it live again.
    ///
    /// Targets: with `n` live processes and total weight `W` (enabled units), every process's target
    /// is `floor(W / n)`, and `W mod n` processes get one more: those that own more than the floor
    /// first (they keep what they have), then by process id; every process computes the same targets. So with unit weights a settled fleet
    /// holds floor or ceil of `W / n` per process, and ticks then write nothing; only units that
    /// must move move.
    ///
    /// # Errors
    ///
    /// A database or connection error. Units claimed or shed before it stay as the database says:
    /// the next tick re-reads them, and units whose shed may have landed are reported lost at once.
    pub fn tick(&self) -> Result<Rebalance> {
        let decided = {
            let _one_at_a_time = self.ticking.lock();
            let decided = self.tick_once();
            if decided.is_err() {
                // A claim may have landed without this process knowing: read the truth next time.
                self.local.lock().reread = true;
            }
            decided
        };
        // Deliver outside the tick's lock, so a reconciler may call back into the leaser. Units
        // chosen to shed are reported lost here, before they are given back below: their work has
        // stopped before another process can claim them.
        self.outbox.flush(&*self.reconciler);
        let mut rebalance = decided?;
        let _one_at_a_time = self.ticking.lock();
        rebalance.shed = self.give_back()?;
        Ok(rebalance)
    }

    fn tick_once(&self) -> Result<Rebalance> {
        let started = Instant::now();
        let id = self.process_id.as_str();
        let live_locally = self.local.lock().live_at(Instant::now());
        let stats = self.db.query_one(
            "read membership stats",
            Policy::IDEMPOTENT,
            &self.sql.stats,
            &[&id],
        )?;
        // The database's truth about what this process owns: re-read only when it may differ from
        // the local view (first tick, a lapse, a failed tick, or another process or an operator
        // changed its units).
        let changes: Option<i64> = stats.get("changes");
        let (known, generation, shedding) = {
            let local = self.local.lock();
            let current = local.ready && !local.reread && local.seen_changes == changes;
            (
                current.then(|| (local.owned.clone(), local.owned_weight)),
                local.generation,
                local.shedding.clone(),
            )
        };
        // `changed`: whether this tick's view may differ from the local one (re-read, claims, sheds).
        let (mut truth, mut owned_weight, mut changed) = match known {
            Some((owned, weight)) => (owned, weight, false),
            None => {
                // Units being shed are still this process's in the database, but no longer its work.
                let read: BTreeMap<Unit, i32> = self
                    .db
                    .query(
                        "read owned units",
                        Policy::IDEMPOTENT,
                        &self.sql.owned,
                        &[&id],
                    )?
                    .iter()
                    .map(unit_row)
                    .filter(|(unit, _)| !shedding.contains_key(unit))
                    .collect();
                let weight = weight_of(&read);
                (Arc::new(read), weight, true)
            }
        };
        let live: i64 = stats.get("live");
        let live_self: bool = stats.get("live_self");
        let others_ids: Vec<String> = stats.get("others");
        let others_weights: Vec<i64> = stats.get("others_weights");
        let others: Vec<Member<'_>> = others_ids
            .iter()
            .zip(&others_weights)
            .map(|(id, weight)| Member {
                id,
                weight: *weight,
            })
            .collect();
        let unowned: i64 = stats.get("unowned_weight");
        let orphaned: i64 = stats.get("orphaned_weight");
        let facts = Facts {
            me: Member {
                id,
                weight: owned_weight,
            },
            others: &others,
            // Units being shed are claimable as soon as they are given back.
            claimable: unowned + orphaned + weight_of(&shedding),
        };
        let target = facts.target();

        let mut claimed = Vec::new();
        let mut shed: BTreeMap<Unit, i32> = BTreeMap::new();
        if live_self && live_locally {
            // Disabled units only appear with a re-read (a weight change moves the counter).
            let disabled = changed && truth.values().any(|w| *w <= 0);
            match facts.decide(i64::from(self.config.max_claim_per_tick)) {
                Step::Claim(budget) => {
                    claimed = self.claim(&mut truth, budget, &shedding)?;
                }
                Step::Shed(target) => shed = self.choose_shed(&mut truth, target),
                Step::Keep if disabled => shed = self.choose_shed(&mut truth, target),
                Step::Keep => {}
            }
            if !claimed.is_empty() || !shed.is_empty() {
                changed = true;
                owned_weight = weight_of(&truth);
            }
        }

        // Adopt the database's truth only while live, judged now (the tick may have waited on the
        // database), and only if nothing forgot the ownership meanwhile (the liveness watcher, a
        // lapsed heartbeat); compare with the local view as it is now, and queue what changed
        // while still holding it, so deliveries keep decision order.
        let (lost, gained, live_now, owned) = {
            let mut local = self.local.lock();
            let live_now =
                live_self && local.live_at(Instant::now()) && local.generation == generation;
            if !live_now {
                truth = Arc::default();
                owned_weight = 0;
                changed = true;
                shed.clear();
            }
            let (lost, gained) = if changed || !Arc::ptr_eq(&local.owned, &truth) {
                let lost: Vec<Unit> = local
                    .owned
                    .keys()
                    .filter(|u| !truth.contains_key(*u))
                    .cloned()
                    .collect();
                let gained: Vec<Unit> = truth
                    .keys()
                    .filter(|u| !local.owned.contains_key(*u))
                    .cloned()
                    .collect();
                (lost, gained)
            } else {
                (Vec::new(), Vec::new())
            };
            self.outbox.push(Delivery::Lost(lost.clone()));
            self.outbox.push(Delivery::Gained(gained.clone()));
            local.owned = truth;
            local.owned_weight = owned_weight;
            // Told lost (above, in this queue), given back once delivered.
            local.shedding.extend(shed);
            local.ready = true;
            local.reread = !live_now;
            local.seen_changes = changes;
            (lost, gained, live_now, local.owned.len())
        };
        self.outbox.flush(&*self.reconciler);
        let hooks = &self.hooks;
        if let (Some(hook), false) = (&hooks.claimed, claimed.is_empty()) {
            hook(claimed.len());
        }
        if let Some(hook) = &hooks.rebalanced {
            hook(started.elapsed());
        }
        if let Some(hook) = &hooks.owned {
            hook(owned, owned_weight);
        }
        log::debug!(
            target: "pgtenure::membership",
            "process {}: {live} live, target {target}, owns {owned} ({owned_weight}), claimed {}",
            self.process_id,
            claimed.len()
        );
        Ok(Rebalance {
            lost,
            gained,
            claimed: claimed.len(),
            shed: 0,
            owned,
            owned_weight,
            fair_share: target,
            live_processes: live,
            live: live_now,
        })
    }

    /// Claims up to `budget` weight, in batches of at most `claim_batch` units. A batch that fails
    /// ends the tick with its error; the next tick re-reads what the database says is owned (a
    /// batch whose answer was lost may have claimed units).
    fn claim(
        &self,
        truth: &mut Arc<BTreeMap<Unit, i32>>,
        mut budget: i64,
        shedding: &BTreeMap<Unit, i32>,
    ) -> Result<Vec<Unit>> {
        // What the process row reports: owned and still being shed.
        let mut weight = weight_of(truth) + weight_of(shedding);
        let mut claimed = Vec::new();
        while budget > 0 {
            let limit =
                i32::try_from(budget.min(i64::from(self.config.claim_batch))).unwrap_or(i32::MAX);
            let slot = (random_u64() % (i32::MAX as u64)) as i32;
            let count = (truth.len() + shedding.len()) as i32;
            let rows = self.db.query(
                "claim units",
                Policy::ONCE,
                &self.sql.claim,
                &[
                    &self.process_id.as_str(),
                    &limit,
                    &budget,
                    &slot,
                    &count,
                    &weight,
                ],
            )?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let (unit, w) = unit_row(row);
                budget -= i64::from(w);
                weight += i64::from(w.max(0));
                Arc::make_mut(truth).insert(unit.clone(), w);
                claimed.push(unit);
            }
        }
        Ok(claimed)
    }

    /// Chooses what to shed down to `target` (see [`choose_shed`]; disabled units always) and takes
    /// it out of this tick's view: the adoption reports it lost, and [`Leaser::give_back`] sheds it
    /// in the database once that was delivered.
    fn choose_shed(
        &self,
        truth: &mut Arc<BTreeMap<Unit, i32>>,
        target: i64,
    ) -> BTreeMap<Unit, i32> {
        let held: Vec<Held> = truth
            .iter()
            .map(|(unit, weight)| Held {
                unit: unit.clone(),
                weight: *weight,
                in_flight: self.reconciler.in_flight(unit),
            })
            .collect();
        let choice = choose_shed(&held, target);
        if choice.is_empty() {
            return BTreeMap::new();
        }
        let map = Arc::make_mut(truth);
        choice
            .into_iter()
            .filter_map(|unit| map.remove(&unit).map(|w| (unit, w)))
            .collect()
    }

    /// Gives back, owner-guarded and only while live, the units chosen to shed (already reported
    /// lost); returns how many the database gave back. A failure keeps them to give back at the next
    /// tick (they stay this process's in the database meanwhile, and nobody works on them).
    fn give_back(&self) -> Result<usize> {
        let (shedding, count, weight) = {
            let local = self.local.lock();
            if local.shedding.is_empty() {
                return Ok(0);
            }
            // The shed statement reports what remains: it is given what the row counts now.
            let (count, weight) = local.reported();
            (local.shedding.clone(), count, weight)
        };
        let tenants: Vec<&str> = shedding.keys().map(|u| u.tenant.as_str()).collect();
        let shards: Vec<i32> = shedding.keys().map(|u| u.shard).collect();
        let result = self.db.query(
            "shed units",
            Policy::IDEMPOTENT,
            &self.sql.shed,
            &[
                &self.process_id.as_str(),
                &tenants,
                &shards,
                &count,
                &weight,
            ],
        );
        let given = match result {
            Ok(rows) => rows.len(),
            Err(e) => {
                self.local.lock().reread = true;
                return Err(e);
            }
        };
        {
            let mut local = self.local.lock();
            for unit in shedding.keys() {
                local.shedding.remove(unit);
            }
        }
        if let (Some(hook), true) = (&self.hooks.shed, given > 0) {
            hook(given);
        }
        log::debug!(
            target: "pgtenure::membership",
            "process {} gave back {given} of {} units chosen to shed",
            self.process_id,
            shedding.len()
        );
        Ok(given)
    }

    /// Deletes process rows expired for longer than the sweep cutoff and frees their units, in one
    /// statement.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn sweep(&self) -> Result<Sweep> {
        let row = self.db.query_one(
            "sweep processes",
            Policy::ONCE,
            &self.sql.sweep,
            &[&self.cutoff_us],
        )?;
        let sweep = Sweep {
            processes: u64::try_from(row.get::<_, i64>("processes")).unwrap_or_default(),
            units: u64::try_from(row.get::<_, i64>("units")).unwrap_or_default(),
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

    /// Gives every owned unit back in one statement and forgets them locally (the reconciler is not
    /// called: drain your work, then call [`Leaser::delete_process`]). Returns the units released.
    ///
    /// # Errors
    ///
    /// A database or connection error; the units then become claimable when the row expires.
    pub fn release(&self) -> Result<Vec<Unit>> {
        let _one_at_a_time = self.ticking.lock();
        let rows = self.db.query(
            "release units",
            Policy::ONCE,
            &self.sql.release,
            &[&self.process_id.as_str()],
        )?;
        let mut local = self.local.lock();
        local.owned = Arc::default();
        local.owned_weight = 0;
        local.shedding.clear();
        drop(local);
        Ok(rows
            .iter()
            .map(|row| Unit {
                tenant: row.get("tenant"),
                shard: row.get("shard"),
            })
            .collect())
    }

    /// Removes the process row (the last step of a graceful shutdown), freeing any unit it still
    /// owns, so live-process counts drop at once.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn delete_process(&self) -> Result<()> {
        let _one_at_a_time = self.ticking.lock();
        self.db.query_one(
            "delete process",
            Policy::ONCE,
            &self.sql.delete_process,
            &[&self.process_id.as_str()],
        )?;
        let mut local = self.local.lock();
        local.forget_all();
        local.last_beat = None;
        local.live_until = None;
        Ok(())
    }

    /// Runs the membership loop on the calling thread until `shutdown` yields or disconnects.
    ///
    /// Heartbeats until the process row is live, retrying with backoff (1 s doubling to 30 s), so a
    /// database that is unreachable at startup delays the process instead of stopping it. Then
    /// ticks at once, and interleaves heartbeats, rebalances and sweeps on their intervals (a
    /// heartbeat that finds the row had expired triggers a tick at once). Loop errors are logged, not
    /// returned. Returns after the database call in progress when the signal comes; each call is
    /// bounded by the pool's connection timeout and the TCP timeouts (see [`Db`]).
    ///
    /// While it runs, a watcher thread of its own (`pgtenure-member`, joined before `run` returns)
    /// reports every owned unit lost at the local liveness deadline if no heartbeat succeeded by then,
    /// even while the loop is stuck in a database call: the process stops its work no later than the
    /// database lets another process claim the units.
    ///
    /// Graceful shutdown: signal, join the thread, then [`Leaser::release`] and
    /// [`Leaser::delete_process`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the watcher thread cannot be started; loop
    /// errors are logged, not returned.
    pub fn run(&self, shutdown: &Receiver<()>) -> Result<()> {
        let (wake, woken) = bounded::<()>(1);
        *self.watch.lock() = Some(wake);
        let result = std::thread::scope(|scope| {
            let watcher = std::thread::Builder::new()
                .name("pgtenure-member".into())
                .spawn_scoped(scope, || self.watch_liveness(&woken))
                .map_err(|e| {
                    Error::setup("could not start the membership liveness watcher").with_source(e)
                });
            let result = watcher.and_then(|_| self.run_loop(shutdown));
            // Disconnecting the wake channel stops the watcher; the scope joins it.
            self.watch.lock().take();
            result
        });
        result
    }

    /// Reports every owned unit lost at the local liveness deadline, even while the run loop is stuck
    /// in a database call (the deadline is re-read after every wake-up, so none is missed).
    fn watch_liveness(&self, woken: &Receiver<()>) {
        loop {
            let deadline = self.live_until().filter(|d| *d > Instant::now());
            select! {
                recv(woken) -> msg => if msg.is_err() { return },
                recv(deadline.map_or_else(never, at)) -> _ => self.expire_if_due(),
            }
        }
    }

    fn run_loop(&self, shutdown: &Receiver<()>) -> Result<()> {
        let (mut backoff, max_backoff) = STARTUP_BACKOFF;
        loop {
            match self.heartbeat() {
                Ok(()) => break,
                Err(e) => {
                    log::warn!(
                        target: "pgtenure::membership",
                        "process {} cannot heartbeat yet ({e}); retrying in {backoff:?}",
                        self.process_id
                    );
                    select! {
                        recv(shutdown) -> _ => return Ok(()),
                        recv(after(backoff)) -> _ => {}
                    }
                    backoff = (backoff * 2).min(max_backoff);
                }
            }
        }
        let start = Instant::now();
        let mut next_beat = start + self.config.heartbeat_interval;
        let mut next_tick = start;
        let mut next_sweep = start + self.config.sweep_interval;
        loop {
            let next = next_beat.min(next_tick).min(next_sweep);
            select! {
                recv(shutdown) -> _ => return Ok(()),
                recv(at(next)) -> _ => {}
            }
            let now = Instant::now();
            if now >= next_beat {
                if let Err(e) = self.heartbeat() {
                    log::warn!(target: "pgtenure::membership", "heartbeat failed: {e}");
                }
                next_beat = now + self.config.heartbeat_interval;
                if self.local.lock().reread {
                    next_tick = now;
                }
            }
            if now >= next_tick {
                if let Err(e) = self.tick() {
                    log::warn!(target: "pgtenure::membership", "rebalance failed: {e}");
                }
                next_tick = Instant::now() + self.config.rebalance_interval;
            }
            if now >= next_sweep {
                if let Err(e) = self.sweep() {
                    log::warn!(target: "pgtenure::membership", "sweep failed: {e}");
                }
                next_sweep = now + self.config.sweep_interval;
            }
        }
    }
}

impl fmt::Debug for Leaser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let local = self.local.lock();
        f.debug_struct("Leaser")
            .field("process_id", &self.process_id)
            .field("processes", &self.sql.processes)
            .field("units", &self.sql.units)
            .field("owned", &local.owned.len())
            .field("ready", &local.ready)
            .field("config", &self.config)
            .finish()
    }
}

fn unit_row(row: &Row) -> (Unit, i32) {
    (
        Unit {
            tenant: row.get("tenant"),
            shard: row.get("shard"),
        },
        row.get("weight"),
    )
}

fn weight_of(units: &BTreeMap<Unit, i32>) -> i64 {
    units.values().map(|w| i64::from((*w).max(0))).sum()
}

/// A random version-4 UUID as text.
fn random_uuid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// Checks UUID text (`8-4-4-4-12` hex digits) and lowercases it.
fn parse_uuid(id: &str) -> Result<String> {
    let well_formed = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if !well_formed {
        return Err(Error::invalid_input(format!(
            "process id {id:?} is not a UUID (8-4-4-4-12 hexadecimal digits)"
        )));
    }
    Ok(id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Leaser>();
        check::<Units>();
        check::<Hooks>();
    }

    #[test]
    fn random_uuids_are_well_formed_version_4() {
        let id = random_uuid();
        assert_eq!(parse_uuid(&id).unwrap(), id);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(random_uuid(), random_uuid());
    }

    #[test]
    fn process_ids_must_be_uuids() {
        assert_eq!(
            parse_uuid("6F9619FF-8B86-D011-B42D-00C04FC964FF").unwrap(),
            "6f9619ff-8b86-d011-b42d-00c04fc964ff"
        );
        for bad in [
            "",
            "not-a-uuid",
            "6f9619ff8b86d011b42d00c04fc964ff",
            "6f9619ff-8b86-d011-b42d-00c04fc964fg",
        ] {
            assert!(parse_uuid(bad).unwrap_err().is_invalid_input(), "{bad:?}");
        }
    }

    #[test]
    #[allow(deprecated)]
    fn zero_config_values_take_the_defaults_and_bad_ones_are_refused() {
        let zero = Config {
            ttl: Duration::ZERO,
            heartbeat_interval: Duration::ZERO,
            claim_batch: 0,
            max_claim_per_tick: 0,
            ..Config::default()
        };
        let c = zero.normalized().unwrap();
        assert_eq!(c.ttl, Duration::from_secs(15));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(5));
        assert_eq!((c.claim_batch, c.max_claim_per_tick), (64, 1024));
        assert!(c.process_id.is_some());

        let clamp = Config {
            claim_batch: 5000,
            ..Config::default()
        };
        assert_eq!(
            clamp.normalized().unwrap().claim_batch,
            1024,
            "clamped to the per-tick cap"
        );

        let refused = [
            Config {
                heartbeat_interval: Duration::from_secs(15),
                ..Config::default()
            },
            Config {
                sweep_cutoff: Duration::from_secs(10),
                ..Config::default()
            },
            Config {
                shed_hysteresis: -0.1,
                ..Config::default()
            },
            Config {
                shed_hysteresis: f64::NAN,
                ..Config::default()
            },
            Config {
                shed_hysteresis: f64::INFINITY,
                ..Config::default()
            },
            Config {
                version: "1.0\0".into(),
                ..Config::default()
            },
            Config {
                process_id: Some("not-a-uuid".into()),
                ..Config::default()
            },
        ];
        for config in refused {
            let shown = format!("{config:?}");
            assert!(
                config.normalized().unwrap_err().is_invalid_input(),
                "{shown}"
            );
        }
    }

    #[test]
    fn statements_render_both_tables() {
        let sql = Statements::new(
            TableName::parse("m.procs").unwrap(),
            TableName::parse("m.units").unwrap(),
        )
        .unwrap();
        assert!(sql.claim.text().contains("UPDATE \"m\".\"units\" u"));
        assert!(sql
            .claim
            .text()
            .contains("FROM \"m\".\"procs\" WHERE process_id"));
        assert!(
            sql.create_units[1].contains("INDEX IF NOT EXISTS \"units_owner\" ON \"m\".\"units\"")
        );
        assert!(sql.create_units[2].contains("\"units_claimable\""));
        assert!(!sql.claim.text().contains('{'));
    }
}
