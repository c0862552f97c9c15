//! Membership: process heartbeats and fair-share ownership of (tenant, shard) units.
//!
//! Each process of a fleet runs a [`Leaser`]. It keeps one row for the process alive with
//! [`Leaser::heartbeat`] (its only steady-state write) and, at each [`Leaser::tick`], claims units
//! until it owns its fair share of the total weight among live processes, or sheds units when it owns
//! well above it. A unit's owner is live while its process row is live, so holding units costs no
//! writes; when a process stops heartbeating, its units become claimable once its TTL has passed by
//! the database clock.
//!
//! A [`Reconciler`] is told which units were lost (and why: [`UnitLoss`]) and gained, lost first,
//! so work can stop before new work starts, and says which units have work in flight, so shedding
//! prefers idle units. Every claim of a unit draws a fencing token: [`Leaser::fence`] checks, inside
//! a transaction of yours, that this process still owns the unit under that token, so a process
//! that was paused while its units moved cannot write for them ([`Leaser::fence_statement`] gives
//! that fence as a value, pinned to the claim, for another driver: [`crate::fence`]). Drive the steps by hand in tests,
//! or let [`Leaser::spawn`] run the loop on a thread it owns in production. (A [`Leaser::tick`] is
//! one such rebalance step; the ticks of [`TickClaims`](crate::tick_claims::TickClaims) are something else, the
//! scheduled instants of a recurring job.) [`Units::assignments`] and [`Units::processes`] show
//! operators who owns what.
//!
//! A new process counts in the fair share, claims, and is shed to once it has shown it stays: from
//! its second heartbeat (its row is then *settled*; see [`Config::warm_up`]). So a slot that keeps
//! crashing and restarting under new ids (a bad deploy, an OOM loop) within a heartbeat interval
//! never takes units from the healthy processes (for slower loops, set `warm_up` to the TTL): 8 processes on 1,000 units with one slot restarting every 300 ms shed none
//! and never had more than that slot's 125 units without a working owner, where counting every
//! live incarnation shed 575 units to incarnations that died and left up to 587 unowned for the
//! whole loop (the crash-loop subject of the checker, `cargo test --release --test checker
//! crash_loop -- --nocapture`). In a cold fleet (no live process owns a unit) a settled
//! process also waits until every other live process it sees has settled, so a fleet started
//! together claims each unit once: eight processes started within one heartbeat interval on 1,000
//! units claim 1,000 units and shed none, where without the wait the first to tick claimed every
//! unit and 1,168 were shed and claimed again (`cargo run --release --example bench -- --only
//! cold-start`). Both count heartbeats, not the wall clock: rounds driven by hand (`heartbeat`,
//! then `tick`) claim nothing in the first round and each unit once from the second.
//! `warm_up: Some(Duration::ZERO)` counts and claims at the first heartbeat and tick.
//!
//! An outage (or failover) longer than the TTL, during which every process stayed healthy, moves
//! no unit: the loop ([`Leaser::run`], [`Leaser::spawn`]) of a process that was cut off from the
//! database (a statement failed for want of it, its heartbeat found its row lapsed, or its tick's
//! read waited longer than a heartbeat interval) claims, sheds and sweeps nothing for one heartbeat
//! interval after its first answer, while it re-adopts its own units (its rows still name it, under
//! the same tokens: they are reported lost at its local deadline and gained again). The others,
//! back within that interval, take theirs back likewise, so nobody acts on a fleet that is only
//! late to return. A process that saw no failure claims a crashed process's units at expiry as
//! before; one that does not come back loses its units one heartbeat interval later. Measured with
//! three processes on 60 units (TTL 2 s, heartbeat interval 667 ms, a 6 s outage, one process
//! reconnecting 350 ms after the others, three trials): 0 of 180 units moved (148 before). The
//! loop's claims and sweeps wait for a pool connection one heartbeat interval at most, so that none
//! waits out an outage and then takes or frees what lapsed during it. Keep the heartbeat interval
//! above the pool's reconnect back-off (500 ms). Ticks driven by hand have no such rule.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use pgtenure::membership::{Config, Leaser, Reconciler, Unit, UnitLoss, Units};
//! use pgtenure::Db;
//!
//! struct Pollers;
//! impl Reconciler for Pollers {
//!     fn units_gained(&self, units: &[Unit]) { /* start polling these */ }
//!     fn units_lost(&self, units: &[Unit], reason: UnitLoss) { /* stop polling these */ }
//! }
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let units = Units::new(&db);
//! units.create_tables()?;
//! units.add(&[Unit::new("acme", 0)?, Unit::new("acme", 1)?])?;
//!
//! let running = Leaser::new(&db, Arc::new(Pollers), Config::default())?.spawn()?;
//! // A write for a unit this process owns, fenced:
//! let unit = Unit::new("acme", 0)?;
//! let mut conn = db.connection()?;
//! let mut tx = conn.transaction()?;
//! if running.leaser().fence(&mut tx, &unit)? {
//!     tx.execute("update offsets set position = position + 1 where tenant = $1", &[&unit.tenant])?;
//! }
//! tx.commit()?;
//! // ... at shutdown: stop the loop, hand the units over, delete the process row.
//! running.stop()?;
//! # Ok(())
//! # }
//! ```

mod config;
mod deliver;
mod fair;
mod holds;
mod leaser;
mod local;
mod run;
mod sql;
mod tick;
mod unit;
mod units;
mod views;
mod warm_up;

pub use self::config::{Config, Hooks, NoHooks};
pub use self::leaser::{Leaser, Sweep};
pub use self::run::Running;
pub use self::sql::{DEFAULT_PROCESSES_TABLE, DEFAULT_UNITS_TABLE};
pub use self::tick::Rebalance;
pub use self::unit::{Reconciler, Unit, UnitLoss};
pub use self::units::Units;
pub use self::views::{Assignment, ProcessInfo, Unowned};
