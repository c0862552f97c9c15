//! pgtenure: coordinate many instances of an application through one PostgreSQL database, without
//! an async runtime.
//!
//! - [`TickClaims`]: each tick of a recurring job runs on exactly one instance.
//! - [`FireClaims`]: one claim per fire key, held for a TTL.
//! - [`Leases`]: one holder per key, with fencing tokens; a managed [`Lease`] renews on a thread of
//!   its own and signals loss on a channel; [`Leases::with_lease`] runs a closure under a lease.
//! - [`Elector`]: one leader per fleet, with terms, resignation and who-leads.
//! - [`membership`]: process heartbeats and fair-share ownership of (tenant, shard) units, a
//!   [`membership::Leaser`] per process driven tick by tick or by its `run` loop.
//! - [`schedule`]: recurring jobs on tick claims, each tick run on one instance when it is due by
//!   the database clock.
//!
//! Operators see what is held with the views (`Leases::holder`, `Leases::list`, `TickClaims::jobs`,
//! `Elector::leaders`, `membership::Units::assignments` and `processes`), release a stuck lease
//! with [`Leases::force_release`], and do both from a shell with the `pgtenure` command (the
//! workspace's `pgtenure-cli` crate), which also runs a command under a lease (`pgtenure lease-run`).
//!
//! Every operation is one SQL statement in its own implicit transaction, prepared once per server
//! connection under a name derived from its content and run with `EXECUTE`: one round trip, planned
//! once, no session state a pooler could mix up, so it works through PgBouncer in transaction mode. Every expiry and busy deadline is computed by PostgreSQL's `now()`, so instances
//! whose clocks disagree still agree. Bad input is refused with
//! [`ErrorKind::InvalidInput`] before anything is sent.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::{Duration, SystemTime};
//! use pgtenure::{Db, TickClaims};
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
//!   [`describe_metrics`] gives their help texts.
//! - `testing`: `testing::TempPostgres`, throwaway servers for tests, and
//!   `testing::ReplicatedPostgres`, a primary with a streaming standby and a failover.
//!
//! # Blocking
//!
//! Every call that touches the database blocks the calling thread (see [`Db`] for the bounds). Do not
//! call pgtenure from inside an async runtime's worker thread.
//!
//! # Configuration
//!
//! One convention everywhere:
//!
//! - A handle is made by `new` from what it cannot do without (the [`Db`], and for a
//!   [`membership::Leaser`] its reconciler, [`membership::Config`] and [`membership::Hooks`]), and
//!   adjusted by consuming `with_*` methods: `TickClaims::new(&db).with_table("jobs")?`. A builder
//!   ([`DbBuilder`]) names its setters after what they set, without `with_`.
//! - A setter returns `Result<Self>` when its value can be invalid and refuses it there, with
//!   [`ErrorKind::InvalidInput`]; nothing checks it again later, and nothing was sent or stored. A
//!   setter whose every value is valid (a switch) returns `Self`.
//! - Every setter's documentation ends with its default. There is no "zero means the default":
//!   a zero duration, a zero size or a blank name is refused, in setters and in
//!   [`membership::Config`] alike (checked once, by [`membership::Leaser::new`]).
//! - An instance *owns* what it claims or acquires ([`TickClaims::with_owner`],
//!   [`FireClaims::with_owner`], [`Leases::with_owner`]); leadership has a *holder*
//!   ([`Elector::with_holder`], [`LeaderInfo`]'s `holder`).
//! - Callbacks are traits, and every method beyond the essential ones has a do-nothing default
//!   ([`membership::Reconciler`]'s `in_flight`, every [`membership::Hooks`] method), so they can
//!   grow without breaking implementations.
//!
//! # Layout
//!
//! - At the root: [`Db`] and [`DbBuilder`] (the shared r2d2 pool behind one handle, whatever its
//!   TLS connector; [`SslMode`], [`StatementMode`]), [`Error`] and [`ErrorKind`] (classified by
//!   SQLSTATE), [`Timestamp`].
//! - [`tick_claims`]: [`TickClaims`] and [`TickClaim`], one row per job.
//! - [`fire_claims`]: [`FireClaims`], one row per fire key.
//! - [`leases`]: [`Leases`], [`Lease`] and its renewal thread, the deadline watcher that signals loss
//!   at the local deadline, [`Leases::fence`], and what operators read and release
//!   ([`Leases::holder`], [`Leases::list`], [`Leases::force_release`], [`Leases::refusal`]).
//! - [`elector`]: [`Elector`], one row per fleet.
//! - [`membership`]: [`membership::Leaser`], [`membership::Units`], the fair-share arithmetic.
//! - [`schedule`]: [`schedule::Scheduler`], recurring jobs on tick claims.
//! - [`migrations`]: schema versions, [`migrate`] for named tables, the SQL per table
//!   ([`migrations::plan`]).
//! - [`testing`] (feature `testing`): [`testing::TempPostgres`], a throwaway server for tests;
//!   [`testing::ReplicatedPostgres`], a primary with a streaming standby, for failover tests.
//!
//! The SQL lives in `sql/<module>/<operation>.sql`, one statement per file.

#![warn(missing_debug_implementations, unreachable_pub)]
#![warn(missing_docs, rust_2018_idioms)]

mod db;
pub mod elector;
mod error;
pub mod fire_claims;
mod input;
mod instance;
pub mod leases;
pub mod membership;
pub mod migrations;
mod observe;
mod row;
pub mod schedule;
mod statement;
mod table_name;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tick_claims;
mod timestamp;

pub use crate::db::{Connection, Db, DbBuilder, SslMode, StatementMode, StatementModes};
pub use crate::elector::{
    Elector, LeaderEvent, LeaderHooks, LeaderInfo, LeaderLoss, Leadership, NoLeaderHooks,
};
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::fire_claims::FireClaims;
pub use crate::input::{MAX_DURATION, MAX_KEY_BYTES, MIN_DURATION};
pub use crate::leases::{
    Grant, KeyRenewal, Lease, LeaseInfo, LeaseLoss, LeaseSummary, Leases, Refusal, Renewal,
};
pub use crate::tick_claims::{JobInfo, TickClaim, TickClaims};
pub use crate::timestamp::Timestamp;

/// Describes every metric pgtenure reports (help text and unit) to the installed recorder, as the
/// `# HELP` lines of a Prometheus exporter show them. The first [`Db`] built does it; call this
/// after installing a recorder later than that.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    observe::describe();
}

/// The channel crate of [`Lease::lost`] and [`membership::Leaser::run`], re-exported.
pub use crossbeam_channel;
/// The driver, re-exported so that users can name its types (`postgres::Transaction`,
/// `postgres::Config`) at the version pgtenure uses.
pub use postgres;
/// The pool, re-exported for [`Db::from_pool`].
pub use r2d2;
/// The pool's connection manager, re-exported for [`Db::from_pool`].
pub use r2d2_postgres;

/// Creates every default table (tick claims, fire claims, leases, leader, processes and units), or
/// brings it to the schema version this pgtenure needs.
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
    send_sync::<TickClaims>();
    send_sync::<TickClaim>();
    send_sync::<FireClaims>();
    send_sync::<Leases>();
    send_sync::<Lease>();
    send_sync::<Grant>();
    send_sync::<Renewal>();
    send_sync::<LeaseInfo>();
    send_sync::<Refusal>();
    send_sync::<Elector>();
    send_sync::<LeaderInfo>();
    send_sync::<Leadership>();
    send_sync::<LeaderEvent>();
    send_sync::<elector::NoLeaderHooks>();
    send_sync::<membership::Leaser>();
    send_sync::<membership::Units>();
    send_sync::<membership::NoHooks>();
    send_sync::<schedule::Scheduler>();
    send_sync::<schedule::Scheduling>();
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
    #[doc = include_str!("../docs/metrics.md")]
    pub struct Metrics;
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
