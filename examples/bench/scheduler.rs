//! The scheduler's lateness: three instances run a job every 200 ms; how long after its tick (by
//! the database clock) each run started, and what the fleet sent per tick.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgtenure::postgres::Client;
use pgtenure::schedule::{Run, Schedule, ScheduleHooks, Scheduler};
use pgtenure::{tick_claims::TickClaims, Db};
use serde_json::{json, Value};

use super::Error;

/// Counts what the instances decided: runs started (each a claim won, then a release) and ticks
/// refused (a claim lost, or skipped while busy).
#[derive(Default)]
struct Counts {
    started: AtomicUsize,
    refused: AtomicUsize,
}

impl ScheduleHooks for Counts {
    fn started(&self, _: &Run) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }
    fn refused(&self, _: &str, _: SystemTime) {
        self.refused.fetch_add(1, Ordering::SeqCst);
    }
}

/// Lateness (run start minus tick, by the database clock) over `secs` seconds.
pub fn lateness(db: &Db, admin: &mut Client, secs: f64) -> Result<Value, Error> {
    let id = std::process::id();
    let (table, runs) = (
        format!("bench_sched_{id}"),
        format!("bench_sched_runs_{id}"),
    );
    TickClaims::new(db).with_table(&table)?.create_table()?;
    admin.batch_execute(&format!(
        "CREATE TABLE \"{runs}\" (tick timestamptz NOT NULL,
                                 started timestamptz NOT NULL DEFAULT clock_timestamp())"
    ))?;
    let counts = Arc::new(Counts::default());
    let period = Duration::from_millis(200);
    let started = (0..3)
        .map(|i| -> Result<_, Error> {
            let (db2, runs) = (db.clone(), runs.clone());
            Ok(Scheduler::new(db)
                .with_table(&table)?
                .with_owner(&format!("instance-{i}"))?
                .with_hooks(counts.clone())
                .job("bench", Schedule::every(period)?, move |run| {
                    db2.connection()?.execute(
                        &format!("INSERT INTO \"{runs}\" (tick) VALUES ($1)"),
                        &[&run.tick()],
                    )?;
                    Ok(())
                })?
                .start()?)
        })
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(Duration::from_secs_f64(secs));
    for scheduler in started {
        scheduler.stop()?;
    }
    let mut late: Vec<f64> = admin
        .query(
            &format!(
                "SELECT extract(epoch FROM started - tick)::float8 * 1000 FROM \"{runs}\" ORDER BY 1"
            ),
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let ticks = late.len();
    late.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| {
        late.get(((ticks as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    let won = counts.started.load(Ordering::SeqCst);
    let refused = counts.refused.load(Ordering::SeqCst);
    // Each won tick is a claim and a release; each refused one a claim.
    let per_tick = (2 * won + refused) as f64 / ticks.max(1) as f64;
    let value = json!({
        "instances": 3, "period_ms": period.as_millis() as u64, "ticks_run": ticks,
        "lateness_median_ms": at(0.5), "lateness_p99_ms": at(0.99), "lateness_worst_ms": late.last(),
        "statements_per_tick_fleet": per_tick,
    });
    println!(
        "scheduler lateness (3 instances, every {period:?}, {ticks} ticks): median {:.2} ms, p99 {:.2} ms; {per_tick:.2} statements per tick for the fleet (a claim each, a release by the winner)",
        at(0.5).unwrap_or_default(),
        at(0.99).unwrap_or_default()
    );
    admin.batch_execute(&format!("DROP TABLE \"{runs}\"; DROP TABLE \"{table}\""))?;
    Ok(value)
}
