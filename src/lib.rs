//! pgtenure: coordinate many instances of an application through one PostgreSQL database, without
//! an async runtime.
//!
//! - [`TickClaims`](tick_claims::TickClaims): each tick of a recurring job runs on exactly one
//!   instance.
//! - [`FireClaims`](fire_claims::FireClaims): one claim per fire key, held for a TTL.
//! - [`Leases`](leases::Leases): one holder per key, with fencing tokens; a managed
//!   [`Lease`](leases::Lease) renews on a thread of its own and signals loss on a channel;
//!   [`Leases::with_lease`](leases::Leases::with_lease) runs a closure under a lease.
//! - [`Elector`](elector::Elector): one leader per fleet, with terms, resignation and who-leads.
//! - [`membership`]: process heartbeats and fair-share ownership of (tenant, shard) units, a
//!   [`Leaser`](membership::Leaser) per process driven tick by tick or by its `run` loop.
//! - [`Semaphore`](semaphores::Semaphore): at most N holders of a key at once, each
//!   [`Permit`](semaphores::Permit) with its own fencing token, renewed on a thread of its own like
//!   a managed lease.
//! - [`schedule`]: recurring jobs on tick claims, each tick run on one instance when it is due by
//!   the database clock.
//!
//! Each primitive's types live in its module, and have that one path
//! (`pgtenure::leases::Leases`); the root holds what every module shares (the [`Db`], the
//! [`Error`]). The [module map](#module-map) below lists the whole public API.
//!
//! Operators see what is held with the views (`Leases::holder`, `Leases::list`, `TickClaims::jobs`,
//! `Elector::leaders`, `Units::assignments` and `processes`, `Semaphore::holders`), release a stuck lease with
//! [`Leases::force_release`](leases::Leases::force_release), and do both from a shell with the
//! `pgtenure` command (the workspace's `pgtenure-cli` crate), which also runs a command under a
//! lease (`pgtenure lease-run`).
//!
//! Every operation is one SQL statement in its own implicit transaction, prepared once per server
//! connection under a name derived from its content and run with `EXECUTE`: one round trip, planned
//! once, no session state a pooler could mix up, so it works through PgBouncer in transaction mode.
//! Every expiry and busy deadline is computed by PostgreSQL's `now()`, so instances whose clocks
//! disagree still agree. Bad input is refused with [`ErrorKind::InvalidInput`] before anything is
//! sent.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::{Duration, SystemTime};
//! use pgtenure::tick_claims::TickClaims;
//! use pgtenure::Db;
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! pgtenure::migrate(&db)?; // creates every default table; safe on every instance at once
//!
//! let ticks = TickClaims::new(&db);
//! if let Some(claim) = ticks.claim("rollup", SystemTime::now(), Duration::from_secs(60))? {
//!     println!("this instance runs tick {:?} (token {})", claim.tick(), claim.token());
//!     claim.release()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! - `tls`: TLS for [`Db::connect`] and [`DbBuilder`] (`sslmode=verify-full`, `sslrootcert`), with
//!   rustls. Off by default; without it a mode that needs TLS is refused, naming the feature.
//! - `cron`: cron schedules for the scheduler (`schedule::Schedule::cron`, `cron_in` with an IANA
//!   time zone), with croner and jiff. Off by default.
//! - `metrics`: counters, gauges and histograms of every primitive (grants, renewals and losses by
//!   reason, leadership per fleet, units moved, scheduled runs and misfires, statement errors by
//!   SQLSTATE class, pool waits) through the `metrics` facade; the application installs the
//!   exporter. Off by default, and then nothing of it is compiled in. `docs/metrics.md` lists them;
//!   `describe_metrics` gives their help texts.
//! - `diesel`: fences on a `diesel::PgConnection` inside the caller's Diesel transaction
//!   (`fence::Fence::check_diesel`). Off by default; Diesel's PostgreSQL backend links libpq.
//! - `testing`: `testing::TempPostgres`, throwaway servers for tests, and
//!   `testing::ReplicatedPostgres`, a primary with a streaming standby and a failover.
//!
//! # Blocking
//!
//! Every call that touches the database blocks the calling thread (see [`Db`] for the bounds). Do not
//! call pgtenure from inside an async runtime's worker thread.
//!
//! # Background loops
//!
//! Each primitive can be driven by hand, one step at a time on the caller's thread (tests, and
//! callers with a loop of their own), or by a loop on a thread the library starts and a handle
//! owns:
//!
//! | by hand | owned loop | its handle |
//! |---|---|---|
//! | [`elector::Elector::is_leader`] | [`elector::Elector::campaign`] | [`elector::Leadership`] |
//! | [`membership::Leaser::heartbeat`], [`tick`](membership::Leaser::tick) | [`membership::Leaser::spawn`] ([`run`](membership::Leaser::run) on a thread of yours) | [`membership::Running`] |
//! | [`schedule::Scheduler::run_pending`] | [`schedule::Scheduler::start`] | [`schedule::Scheduling`] |
//!
//! `campaign` borrows the elector (it keeps polling a clone); `spawn` and `start` take the leaser
//! and the scheduler (reach them with `leaser()` and `scheduler()`). Every handle has one shape:
//! `stop(self) -> Result<()>` stops the loop (resigning, releasing the units, or waiting for the
//! runs in progress) and returns within a bound its documentation states, `is_finished()` says
//! whether the loop ended on its own, and dropping the handle does what `stop` does and logs the
//! error instead of returning it. What a loop decides reaches the application in decision order:
//! a leadership's [`events`](elector::Leadership::events) and [`elector::LeaderHooks`], the
//! [`membership::Reconciler`] and [`membership::Hooks`], and [`schedule::ScheduleHooks`]. A loop
//! that meets an error waiting cannot fix as it starts (a missing table, a missing privilege)
//! ends with it instead of retrying forever: `campaign` and `start` return it, a spawned leaser's
//! loop ends (`is_finished()` turns true) and its `stop` returns it.
//!
//! A managed lease ([`leases::Leases::acquire`]) is held, not run: its renewal thread belongs to
//! the [`leases::Lease`], which ends it with [`release`](leases::Lease::release) (or `Drop`) and
//! reports its loss on [`lost`](leases::Lease::lost).
//!
//! # Configuration
//!
//! One convention everywhere:
//!
//! - A handle is made by `new` from what it cannot do without (the [`Db`], and for a
//!   [`membership::Leaser`] its reconciler and [`membership::Config`]), and adjusted by consuming
//!   `with_*` methods: `TickClaims::new(&db).with_table("jobs")?`. Hooks attach the same way on
//!   every handle that has them: `with_hooks(Arc<dyn …Hooks>)`. A builder
//!   ([`DbBuilder`]) names its setters after what they set, without `with_`.
//! - A setter returns `Result<Self>` when its value can be invalid and refuses it there, with
//!   [`ErrorKind::InvalidInput`]; nothing was sent or stored. A setter whose every value is valid
//!   (a switch) returns `Self`. A rule between two settings (an elector's retry period below its
//!   TTL, a membership claim batch within the per-tick cap, a heartbeat within the TTL) is checked
//!   once, where the handle is built or first used ([`elector::Elector::campaign`],
//!   [`membership::Leaser::new`]), and its error names both settings: the order of the setters
//!   never matters. Nothing is clamped: a value out of range is refused.
//! - Every setter's documentation ends with its default. There is no "zero means the default":
//!   a zero duration, a zero size or a blank name is refused, in setters and in
//!   [`membership::Config`] alike (checked once, by [`membership::Leaser::new`]).
//! - An instance *owns* what it claims or acquires ([`tick_claims::TickClaims::with_owner`],
//!   [`fire_claims::FireClaims::with_owner`], [`leases::Leases::with_owner`]); leadership has a *holder*
//!   ([`elector::Elector::with_holder`], [`elector::LeaderInfo`]'s `holder`).
//! - Callbacks are traits, and every method beyond the essential ones has a do-nothing default
//!   ([`membership::Reconciler`]'s `in_flight`, every [`membership::Hooks`] method), so they can
//!   grow without breaking implementations.
//!
//! # Module map
//!
//! Every public item, by its one path (methods are on each type's page).
//!
//! At the root, what all modules share:
//! - [`Db`]: the shared r2d2 pool of `postgres` connections every primitive takes; [`DbBuilder`]
//!   configures one (TLS, pool size, statement mode, `application_name`).
//! - [`Connection`]: a connection of the pool, for your own statements (a fenced write).
//! - [`SslMode`], [`StatementMode`]: how connections use TLS and send statements;
//!   [`StatementModes`]: how many statements went each way.
//! - [`Error`], [`ErrorKind`], [`Result`]: the one error type, classified by SQLSTATE.
//! - [`Timestamp`]: a time shown as RFC 3339 in UTC, as the operator views show them.
//! - [`migrate`]: creates every default table; `describe_metrics` (feature `metrics`): the
//!   metrics' help texts.
//! - [`MIN_DURATION`], [`MAX_DURATION`], [`MAX_KEY_BYTES`]: the limits every TTL, busy period and
//!   key is checked against.
//! - [`postgres`], [`r2d2`], [`r2d2_postgres`], [`crossbeam_channel`], and `diesel` (feature
//!   `diesel`): the crates in the API, re-exported.
//!
//! [`tick_claims`], one row per job:
//! - [`TickClaims`](tick_claims::TickClaims): claims a job's tick for one instance.
//! - [`TickClaim`](tick_claims::TickClaim): a tick won (token, deadline, `extend`, `fence`,
//!   `release`).
//! - [`JobInfo`](tick_claims::JobInfo): a job's row, for operators.
//! - [`tick_claims::DEFAULT_TABLE`].
//!
//! [`fire_claims`], one row per fire key:
//! - [`FireClaims`](fire_claims::FireClaims): claims a fire key once for a TTL; `purge`.
//! - [`fire_claims::DEFAULT_TABLE`], [`fire_claims::DEFAULT_TTL`].
//!
//! [`leases`], one holder per key:
//! - [`Leases`](leases::Leases): a family of leases for one owner: managed (`acquire`,
//!   `with_lease`), raw (`try_acquire`, `renew`, `release`), `fence`, and what operators read and
//!   release (`holder`, `list`, `force_release`, `refusal`).
//! - [`Lease`](leases::Lease): a managed lease, renewed on its own thread, its loss on a channel.
//! - [`LeaseLoss`](leases::LeaseLoss): why a managed lease was lost.
//! - [`Grant`](leases::Grant), [`Renewal`](leases::Renewal), [`KeyRenewal`](leases::KeyRenewal):
//!   what a raw acquire and a raw renewal answer.
//! - [`Refusal`](leases::Refusal): why an acquire was refused.
//! - [`LeaseInfo`](leases::LeaseInfo), [`LeaseSummary`](leases::LeaseSummary): a key's row and a
//!   listing's totals, for operators.
//! - [`leases::DEFAULT_TABLE`], [`leases::MIN_MANAGED_TTL`].
//!
//! [`semaphores`], at most N holders per key:
//! - [`Semaphore`](semaphores::Semaphore): one owner's permits (`acquire`, `with_permit`) and
//!   what operators read (`holders`).
//! - [`Permit`](semaphores::Permit): a held permit, renewed on its own thread, its loss on a
//!   channel ([`LeaseLoss`](leases::LeaseLoss)), `fence`, `release`.
//! - [`PermitInfo`](semaphores::PermitInfo): a live permit, for operators.
//! - [`semaphores::DEFAULT_TABLE`], [`semaphores::MAX_PERMITS`].
//!
//! [`elector`], one leader per fleet:
//! - [`Elector`](elector::Elector): polls for the leadership (`is_leader`), `resign`,
//!   `request_resign`, `fence`, `leader`, `leaders`, and `campaign`.
//! - [`Leadership`](elector::Leadership): a campaign's loop handle.
//! - [`LeaderEvent`](elector::LeaderEvent), [`LeaderLoss`](elector::LeaderLoss): what a campaign
//!   tells, in decision order.
//! - [`LeaderHooks`](elector::LeaderHooks), [`NoLeaderHooks`](elector::NoLeaderHooks): a campaign's
//!   observer.
//! - [`LeaderInfo`](elector::LeaderInfo): who leads a fleet, for everyone.
//! - [`elector::DEFAULT_TABLE`], [`elector::DEFAULT_NAME`], [`elector::DEFAULT_TTL`],
//!   [`elector::EVENTS_CAPACITY`].
//!
//! [`membership`], fair-share ownership of units:
//! - [`Leaser`](membership::Leaser): one process's membership (`heartbeat`, `tick`, `sweep`,
//!   `owned`, `fence`, `release`, `run`, `spawn`).
//! - [`Running`](membership::Running): a spawned leaser's loop handle.
//! - [`Config`](membership::Config): a leaser's timing and claim sizing.
//! - [`Reconciler`](membership::Reconciler): the application's side (units gained and lost);
//!   [`UnitLoss`](membership::UnitLoss): why units were lost.
//! - [`Hooks`](membership::Hooks), [`NoHooks`](membership::NoHooks): a leaser's observer.
//! - [`Unit`](membership::Unit): a (tenant, shard) unit.
//! - [`Units`](membership::Units): the fleet's units (`add`, `remove`, `set_weight`) and what
//!   operators read (`assignments`, `processes`, `unowned`).
//! - [`Rebalance`](membership::Rebalance), [`Sweep`](membership::Sweep): what a tick and a sweep
//!   did.
//! - [`Assignment`](membership::Assignment), [`ProcessInfo`](membership::ProcessInfo),
//!   [`Unowned`](membership::Unowned): the operators' views.
//! - [`membership::DEFAULT_PROCESSES_TABLE`], [`membership::DEFAULT_UNITS_TABLE`].
//!
//! [`fence`], fencing from any driver:
//! - [`Fence`](fence::Fence): a held thing's fence as a value (statement text and typed
//!   parameters) that any driver runs inside its own transaction (`check` on a
//!   `postgres::Transaction`, `check_diesel` with feature `diesel`); `docs/fencing.md` shows
//!   Diesel, psql and Python. Every held thing has `fence(tx)` and `fence_statement()`.
//! - [`Param`](fence::Param): one typed parameter of a fence.
//!
//! [`migrations`], schema versions:
//! - [`migrations::migrate`]: brings named tables to this build's schema version;
//!   [`migrations::plan`]: the SQL it would run, per table ([`Plan`](migrations::Plan)), applying
//!   nothing; [`Tables`](migrations::Tables): which tables.
//!
//! [`schedule`], recurring jobs on tick claims:
//! - [`Scheduler`](schedule::Scheduler): the jobs of one instance (`job`, `with_job`,
//!   `run_pending`, `start`).
//! - [`Scheduling`](schedule::Scheduling): a started scheduler's loop handle.
//! - [`Schedule`](schedule::Schedule): `every` period, or `cron` (feature `cron`).
//! - [`Job`](schedule::Job): a job with its options; [`Misfire`](schedule::Misfire): what to do
//!   with missed ticks.
//! - [`Run`](schedule::Run): the tick a run was given (token, deadline, `fence`);
//!   [`RunResult`](schedule::RunResult): what a job returns.
//! - [`ScheduleHooks`](schedule::ScheduleHooks), [`NoScheduleHooks`](schedule::NoScheduleHooks):
//!   a scheduler's observer; [`Clock`](schedule::Clock): a host clock for tests.
//!
//! `testing` (feature `testing`), throwaway servers for tests:
//! - `TempPostgres`, `TempPostgresBuilder`: a server of its own in a temporary directory.
//! - `ReplicatedPostgres`, `Replication`: a primary with a streaming standby, and a failover.
//! - `PgBouncer`: a pooler in front of a server.
//! - `database_url`: `$DATABASE_URL`, else a shared throwaway server; `render_sql`: a statement
//!   of `sql/` with its tables, for other clients.
//!
//! The SQL lives in `sql/<module>/<operation>.sql`, one statement per file.

// docs.rs builds every feature (Cargo.toml) and marks what each item needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_debug_implementations, unreachable_pub)]
#![warn(missing_docs, rust_2018_idioms)]

mod busy;
mod db;
mod deliver;
pub mod elector;
mod error;
pub mod fence;
pub mod fire_claims;
mod input;
mod instance;
pub mod leases;
pub mod membership;
pub mod migrations;
mod observe;
mod outage;
mod row;
pub mod schedule;
pub mod semaphores;
mod statement;
mod table_name;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod tick_claims;
mod timestamp;

pub use crate::db::{Connection, Db, DbBuilder, Freed, SslMode, StatementMode, StatementModes};
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::input::{MAX_DURATION, MAX_KEY_BYTES, MIN_DURATION};
pub use crate::timestamp::Timestamp;

/// Describes every metric pgtenure reports (help text and unit) to the installed recorder, as the
/// `# HELP` lines of a Prometheus exporter show them. The first [`Db`] built does it; call this
/// after installing a recorder later than that.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    observe::describe();
}

/// The channel crate of [`leases::Lease::lost`] and [`membership::Leaser::run`], re-exported.
pub use crossbeam_channel;
/// Diesel, re-exported (feature `diesel`) so that users can name the connection type
/// [`fence::Fence::check_diesel`] takes at the version pgtenure resolved.
#[cfg(feature = "diesel")]
#[cfg_attr(docsrs, doc(cfg(feature = "diesel")))]
pub use diesel;
/// The driver, re-exported so that users can name its types (`postgres::Transaction`,
/// `postgres::Config`) at the version pgtenure uses.
pub use postgres;
/// The pool, re-exported for [`Db::from_pool`].
pub use r2d2;
/// The pool's connection manager, re-exported for [`Db::from_pool`].
pub use r2d2_postgres;

/// Creates every default table (tick claims, fire claims, leases, leader, processes, units and
/// semaphores), or brings it to the schema version this pgtenure needs.
///
/// Each table's version is recorded in its comment; its missing steps (each idempotent) and the
/// new record run in one transaction under a transaction-level advisory lock, so every instance
/// may call this at startup at the same moment. A table at a newer version than this pgtenure
/// knows is refused, and then nothing was changed: a newer pgtenure migrated it (this one keeps
/// working against it). Tables with other names: [`migrations::migrate`] with
/// [`migrations::Tables`], or each primitive's `create_table`. The SQL it would run, for a DBA
/// who applies DDL by hand: [`migrations::plan`] and `pgtenure migrate --dry-run`; the versions
/// and rolling upgrades: `docs/upgrading.md`.
///
/// # Errors
///
/// [`ErrorKind::Schema`] when a table is at a newer version than this pgtenure knows (upgrade
/// pgtenure; during a rolling upgrade or after a rollback, go on without migrating: the handles
/// check for themselves) or is recorded as another kind of table; a database or connection error (creating and
/// altering need `CREATE` on the schema and ownership of the tables; a table at the current
/// version needs neither).
pub fn migrate(db: &Db) -> Result<()> {
    migrations::migrate(db, &migrations::Tables::default()).map(drop)
}

// Every public handle and value crosses threads: checked when the crate compiles.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Db>();
    send_sync::<tick_claims::TickClaims>();
    send_sync::<tick_claims::TickClaim>();
    send_sync::<fire_claims::FireClaims>();
    send_sync::<leases::Leases>();
    send_sync::<leases::Lease>();
    send_sync::<leases::Grant>();
    send_sync::<leases::Renewal>();
    send_sync::<leases::LeaseInfo>();
    send_sync::<leases::Refusal>();
    send_sync::<elector::Elector>();
    send_sync::<elector::LeaderInfo>();
    send_sync::<elector::Leadership>();
    send_sync::<elector::LeaderEvent>();
    send_sync::<elector::NoLeaderHooks>();
    send_sync::<membership::Leaser>();
    send_sync::<membership::Units>();
    send_sync::<membership::NoHooks>();
    send_sync::<semaphores::Semaphore>();
    send_sync::<semaphores::Permit>();
    send_sync::<semaphores::PermitInfo>();
    send_sync::<schedule::Scheduler>();
    send_sync::<schedule::Scheduling>();
    send_sync::<fence::Fence>();
    send_sync::<migrations::Plan>();
    send_sync::<migrations::Tables>();
};

/// The README's examples, compiled as doctests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guides in `docs/`, compiled as doctests so that any Rust they hold stays true.
#[cfg(doctest)]
mod docs_doctests {
    #[doc = include_str!("../docs/alerts.md")]
    pub struct Alerts;
    #[doc = include_str!("../docs/connections.md")]
    pub struct Connections;
    #[doc = include_str!("../docs/design.md")]
    pub struct Design;
    #[doc = include_str!("../docs/fencing.md")]
    pub struct Fencing;
    #[doc = include_str!("../docs/metrics.md")]
    pub struct Metrics;
    #[doc = include_str!("../docs/house.md")]
    pub struct House;
    #[doc = include_str!("../docs/high-availability.md")]
    pub struct HighAvailability;
    #[doc = include_str!("../docs/operating.md")]
    pub struct Operating;
    #[doc = include_str!("../docs/operating-notes.md")]
    pub struct OperatingNotes;
    #[doc = include_str!("../docs/performance.md")]
    pub struct Performance;
    #[doc = include_str!("../docs/poolers.md")]
    pub struct Poolers;
    #[doc = include_str!("../docs/primitives.md")]
    pub struct Primitives;
    #[doc = include_str!("../docs/reliability.md")]
    pub struct Reliability;
    #[doc = include_str!("../docs/upgrading.md")]
    pub struct Upgrading;
}
