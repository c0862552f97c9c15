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
//! use pgtenure::membership::{Config, Leaser, NoHooks, Reconciler, Unit, Units};
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
//! let leaser = Arc::new(Leaser::new(&db, Arc::new(Pollers), Config::default(), Arc::new(NoHooks))?);
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

mod config;
mod deliver;
mod fair;
mod leaser;
mod local;
mod run;
mod sql;
mod tick;
mod unit;
mod units;

pub use self::config::{Config, Hooks, NoHooks};
pub use self::leaser::{Leaser, Sweep};
pub use self::sql::{DEFAULT_PROCESSES_TABLE, DEFAULT_UNITS_TABLE};
pub use self::tick::Rebalance;
pub use self::unit::{Reconciler, Unit};
pub use self::units::Units;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Leaser>();
        check::<Units>();
        check::<NoHooks>();
    }
}
