//! A service's life: start a scheduler, a leadership campaign and a membership loop, run until
//! SIGTERM or SIGINT (Ctrl-C), then shut down in order, handing everything over.
//!
//! Run it with `cargo run --example service` and press Ctrl-C, or `-- 10` to have it send itself
//! SIGTERM after 10 s. It uses `DATABASE_URL` when set, else a throwaway server it starts and
//! removes. Its units are claimed once its membership row has settled (its second heartbeat, one
//! heartbeat interval after it starts: 5 s by default).
//!
//! No signal crate is needed: the signals are blocked before any thread starts (every thread
//! inherits the mask), and the main thread waits for one with `sigwait`. A process manager's
//! SIGTERM then never interrupts a renewal or a run half-way; it only starts the shutdown.

use std::sync::Arc;
use std::time::Duration;

use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::schedule::{Schedule, Scheduler};
use pgtenure::{elector::Elector, Db};

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
    // Before any thread starts: SIGTERM and SIGINT wait for `sigwait` instead of killing us.
    let signals = blocked(&[libc::SIGTERM, libc::SIGINT]);

    let db = Db::connect(&pgtenure::testing::database_url()?)?;
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
            // SAFETY: sends a signal to this very process.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        });
    }
    let signal = wait(&signals);
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

/// Blocks `signals` in this thread (and every thread it starts), returning the set to wait on.
fn blocked(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is initialised by sigemptyset before use; the calls only read and
    // write this set and the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in signals {
            libc::sigaddset(&mut set, *signal);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits for one of the blocked signals in `set`.
fn wait(set: &libc::sigset_t) -> libc::c_int {
    let mut signal = 0;
    // SAFETY: `set` was initialised by `blocked`, and `signal` is a valid place to write.
    unsafe { libc::sigwait(set, &mut signal) };
    signal
}
