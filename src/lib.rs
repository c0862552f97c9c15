//! pgtenure: coordinate many instances of an application through one PostgreSQL database, without
//! an async runtime.
//!
//! - [`tick_claims::TickClaims`]: each tick of a recurring job runs on exactly one instance.
//! - [`fire_claims::FireClaims`]: one claim per fire key, held for a TTL.
//! - [`leases::Leases`]: one holder per key, with fencing tokens; a managed [`leases::Lease`] renews on a thread of
//!   its own and signals loss on a channel; [`leases::Leases::with_lease`] runs a closure under a lease.
//! - [`elector::Elector`]: one leader per fleet, with terms, resignation and who-leads.
//! - [`membership`]: process heartbeats and fair-share ownership of (tenant, shard) units, a
//!   [`membership::Leaser`] per process driven tick by tick or by its `run` loop.
//! - [`schedule`]: recurring jobs on tick claims, each tick run on one instance when it is due by
//!   the database clock.
//!
//! Operators see what is held with the views (`Leases::holder`, `Leases::list`, `TickClaims::jobs`,
//! `Elector::leaders`, `membership::Units::assignments` and `processes`), release a stuck lease
//! with [`leases::Leases::force_release`], and do both from a shell with the `pgtenure` command (the
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
//! use pgtenure::{Db, tick_claims::TickClaims};
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
//! # Layout
//!
//! - At the root: [`Db`] and [`DbBuilder`] (the shared r2d2 pool behind one handle, whatever its
//!   TLS connector; [`SslMode`], [`StatementMode`]), [`Error`] and [`ErrorKind`] (classified by
//!   SQLSTATE), [`Timestamp`].
//! - [`tick_claims`]: [`tick_claims::TickClaims`] and [`tick_claims::TickClaim`], one row per job.
//! - [`fire_claims`]: [`fire_claims::FireClaims`], one row per fire key.
//! - [`leases`]: [`leases::Leases`], [`leases::Lease`] and its renewal thread, the deadline watcher that signals loss
//!   at the local deadline, [`leases::Leases::fence`], and what operators read and release
//!   ([`leases::Leases::holder`], [`leases::Leases::list`], [`leases::Leases::force_release`], [`leases::Leases::refusal`]).
//! - [`elector`]: [`elector::Elector`], one row per fleet.
//! - [`membership`]: [`membership::Leaser`], [`membership::Units`], the fair-share arithmetic.
//! - [`schedule`]: [`schedule::Scheduler`], recurring jobs on tick claims.
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
pub use crate::error::{Error, ErrorKind, Result};
pub use crate::input::{MAX_DURATION, MAX_KEY_BYTES, MIN_DURATION};
pub use crate::timestamp::Timestamp;

/// Describes every metric pgtenure reports (help text and unit) to the installed recorder, as the
/// `# HELP` lines of a Prometheus exporter show them. The first [`Db`] built does it; call this
/// after installing a recorder later than that.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    observe::describe();
}

/// The channel crate of [`leases::Lease::lost`] and [`membership::Leaser::run`], re-exported.
pub use crossbeam_channel;
/// The driver, re-exported so that users can name its types (`postgres::Transaction`,
/// `postgres::Config`) at the version pgtenure uses.
pub use postgres;
/// The pool, re-exported for [`Db::from_pool`].
pub use r2d2;
/// The pool's connection manager, re-exported for [`Db::from_pool`].
pub use r2d2_postgres;

/// Creates every default table (tick claims, fire claims, leases, leader, processes and units) unless
/// it exists.
///
/// Idempotent, and safe when every instance calls it at the same moment: each table is created under
/// a transaction-level advisory lock. Tables with other names are created by each primitive's
/// `create_table`.
///
/// # Errors
///
/// A database or connection error; creating needs `CREATE` on the schema.
pub fn migrate(db: &Db) -> Result<()> {
    tick_claims::TickClaims::new(db).create_table()?;
    fire_claims::FireClaims::new(db).create_table()?;
    leases::Leases::new(db).create_table()?;
    elector::Elector::new(db).create_table()?;
    membership::Units::new(db).create_tables()?;
    Ok(())
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
    send_sync::<schedule::Scheduler>();
    send_sync::<schedule::Scheduling>();
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
}
