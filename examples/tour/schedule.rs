//! Part 1b: the same kind of job, written with the scheduler instead of a hand-made tick loop.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use pgtenure::schedule::{Schedule, Scheduler};
use pgtenure::Db;

use crate::clock::clock;
use crate::INSTANCES;

const TICKS: usize = 6;
const PERIOD: Duration = Duration::from_millis(250);
/// How far ahead instance-a's clock runs.
const FAST: Duration = Duration::from_millis(1500);

/// A run: its tick, the instance, and the database clock when it started.
type Ran = (SystemTime, &'static str, SystemTime);

/// Three schedulers run a job every 250 ms; instance-a's clock runs 1.5 s fast, and still neither
/// runs a tick early nor wins them all: ticks are due by the database's clock.
pub fn scheduler(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "1b. The scheduler: job \"report\" every {PERIOD:?}, three instances, instance-a's clock \
         {FAST:?} fast"
    );
    let job = format!("report-{}", std::process::id());
    let runs: Arc<Mutex<Vec<Ran>>> = Arc::default();
    let started = INSTANCES
        .iter()
        .map(|&name| {
            let runs = runs.clone();
            let run_db = db.clone();
            let mut scheduler = Scheduler::new(db).with_owner(name)?;
            if name == "instance-a" {
                scheduler = scheduler.with_clock(Arc::new(|| SystemTime::now() + FAST));
            }
            scheduler
                .job(&job, Schedule::every(PERIOD)?, move |run| {
                    let row = run_db
                        .connection()?
                        .query_one("SELECT clock_timestamp()", &[])?;
                    runs.lock().push((run.tick(), name, row.get(0)));
                    Ok(())
                })?
                .start()
        })
        .collect::<Result<Vec<_>, pgtenure::Error>>()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while runs.lock().len() < TICKS && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for scheduler in started {
        scheduler.stop()?;
    }
    let mut runs = runs.lock().clone();
    runs.sort();
    for (tick, name, at) in runs.iter().take(TICKS) {
        let after = at.duration_since(*tick).map_or_else(
            |e| format!("{:?} EARLY (bug)", e.duration()),
            |d| format!("{:.1?} after it", d),
        );
        println!(
            "   tick {} ran on {name:<10} at {} by the database clock, {after}",
            clock(*tick),
            clock(*at)
        );
    }
    let ticks: std::collections::BTreeSet<_> = runs.iter().map(|(t, _, _)| *t).collect();
    let fast = runs.iter().filter(|(_, n, _)| *n == "instance-a").count();
    println!(
        "   {} runs of {} ticks, none early; the fast instance won {fast} of them\n",
        runs.len(),
        ticks.len()
    );
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice");
    Ok(())
}
