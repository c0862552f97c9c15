//! A service's life: start a scheduler, a leadership campaign and a membership loop, run until
//! SIGTERM or SIGINT (Ctrl-C), then shut down in order, handing everything over.
//!
//! Run it against a database with `DATABASE_URL=postgres://user@host/db cargo run --example
//! service` (or libpq's `PGHOST`, `PGDATABASE`, ... as for psql) and press Ctrl-C, or add `-- 10`
//! to have it send itself SIGTERM after 10 s. Its units are claimed once its membership row has
//! settled (its second heartbeat, one heartbeat interval after it starts: 5 s by default).
//!
//! The signals are caught with the `signal-hook` crate (`signal-hook = { version = "0.3",
//! default-features = false, features = ["iterator"] }`), and the main thread waits for one:
//! a process manager's SIGTERM never interrupts a renewal or a run half-way; it only starts the
//! shutdown. Everything here compiles as it is in an application.

use std::sync::Arc;
use std::time::Duration;

use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::schedule::{Schedule, Scheduler};
use pgtenure::{elector::Elector, Db};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

struct Workers;

impl Reconciler for Workers {
    fn units_gained(&self, units: &[Unit]) {
        println!("  start work on {} units", units.len());
    }
    fn units_lost(&self, units: &[Unit], reason: UnitLoss) {
        println!("  stop work on {} units ({reason})", units.len());
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Before anything starts: SIGTERM and SIGINT are caught, to be waited for below.
    let mut signals = Signals::new([SIGTERM, SIGINT])?;

    // DATABASE_URL when set, else libpq's environment as psql reads it.
    let db = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Db::connect(&url)?,
        _ => Db::from_env()?,
    };
    pgtenure::migrate(&db)?; // every default table
    let units: Vec<Unit> = (0..8)
        .map(|i| Unit::new("demo", i))
        .collect::<Result<_, _>>()?;
    Units::new(&db).add(&units)?;

    let membership = Leaser::new(&db, Arc::new(Workers), Default::default())?.spawn()?;
    let leadership = Elector::new(&db).with_name("service-demo")?.campaign()?;
    let every = Schedule::every(Duration::from_secs(2))?;
    let scheduling = Scheduler::new(&db)
        .job("report", every, |run| {
            println!("  report for tick {}", pgtenure::Timestamp::new(run.tick()));
            Ok(())
        })?
        .start()?;
    println!(
        "running (leading: {}); send SIGTERM or press Ctrl-C to stop",
        leadership.is_leading()
    );

    if let Some(secs) = std::env::args().nth(1).and_then(|s| s.parse::<u64>().ok()) {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            let _ = signal_hook::low_level::raise(SIGTERM);
        });
    }
    // Waits for the first of them.
    let signal = signals.forever().next().unwrap_or(SIGTERM);
    println!("got signal {signal}: shutting down");

    // New work first: no tick claimed from now on, runs in progress finish.
    scheduling.stop()?;
    // Leadership: resign, so a successor is elected at once rather than after the TTL.
    leadership.stop()?;
    // Units: tell the reconciler, give them back, delete the process row.
    membership.stop()?;
    println!("stopped cleanly");
    Ok(())
}
