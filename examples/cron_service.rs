//! A service with recurring jobs, run as three instances: each tick of each job runs on one of them.
//!
//! Run it with `cargo run --example cron_service` (add `-- 30` to run for 30 s; the default is 15).
//! Cron schedules need the library's feature `cron`, which this crate's examples have. It uses `DATABASE_URL` when set, else a throwaway server it starts and removes
//! (`demo_database`, the one part an application writes differently).
//!
//! Two jobs: `heartbeat-report` every 5 s (`Schedule::every`), and `sweep` on a cron expression,
//! every 3 seconds (`*/3 * * * * *`, six fields with seconds; a real service would write
//! `0 3 * * *` for 03:00 every day). The three instances are threads here, each with its own
//! scheduler, as three processes would have; the jobs write their runs into a table, fenced by the
//! tick claim's token, and the example prints who ran what.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgtenure::schedule::{Job, Run, RunResult, Schedule, ScheduleHooks, Scheduler};
use pgtenure::Db;

const INSTANCES: [&str; 3] = ["instance-a", "instance-b", "instance-c"];

/// Logs every run and every refusal of this instance.
struct Report(&'static str);

impl ScheduleHooks for Report {
    fn finished(&self, run: &Run, took: Duration) {
        println!(
            "  {} ran {:<16} tick {} (token {}) in {took:.1?}",
            self.0,
            run.job_id(),
            seconds(run.tick()),
            run.token()
        );
    }
    fn failed(&self, run: &Run, error: &pgtenure::Error) {
        println!("  {} failed {}: {error}", self.0, run.job_id());
    }
}

fn seconds(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:03}", d.as_secs() % 100_000, d.subsec_millis())
}

/// The job: records its run in `runs`, in a transaction fenced by the tick's claim.
fn record(db: &Db, runs: &str) -> impl Fn(&Run) -> RunResult + Send + Sync + 'static {
    let (db, runs) = (db.clone(), runs.to_owned());
    move |run| {
        let mut conn = db.connection()?;
        let mut tx = conn.transaction()?;
        if !run.fence(&mut tx)? {
            return Err("the tick's claim was taken over; not writing".into());
        }
        tx.execute(
            &format!("INSERT INTO {runs} (job_id, tick, token) VALUES ($1, $2, $3)"),
            &[&run.job_id(), &run.tick(), &run.token()],
        )?;
        tx.commit()?;
        Ok(())
    }
}

/// The demo's database, and the one line an application does differently: an application connects
/// with `Db::connect(&url)` or `Db::from_env()`. Here `pgtenure::testing` (the `testing` feature,
/// which this crate's examples have and an application does not) uses `DATABASE_URL` when set,
/// else starts a throwaway server and removes it when the demo exits.
fn demo_database() -> Result<Db, Box<dyn std::error::Error>> {
    Ok(Db::connect(&pgtenure::testing::database_url()?)?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = match std::env::args().nth(1) {
        Some(arg) => arg.parse()?,
        None => 15,
    };
    let db = demo_database()?;
    pgtenure::migrate(&db)?;
    let (claims, runs) = (
        format!("cron_service_ticks_{}", std::process::id()),
        format!("cron_service_runs_{}", std::process::id()),
    );
    pgtenure::tick_claims::TickClaims::new(&db)
        .with_table(&claims)?
        .create_table()?;
    db.connection()?.batch_execute(&format!(
        "CREATE TABLE {runs} (job_id text, tick timestamptz, token bigint,
                              PRIMARY KEY (job_id, tick))"
    ))?;

    println!("three instances, two jobs, {secs} s:");
    let started = INSTANCES
        .iter()
        .map(|&name| {
            Scheduler::new(&db)
                .with_table(&claims)?
                .with_owner(name)?
                .with_hooks(Arc::new(Report(name)))
                .job(
                    "heartbeat-report",
                    Schedule::every(Duration::from_secs(5))?,
                    record(&db, &runs),
                )?
                .with_job(
                    Job::new(
                        "sweep",
                        Schedule::cron("*/3 * * * * *")?,
                        record(&db, &runs),
                    )?
                    .with_jitter(Duration::from_millis(200))?,
                )?
                .start()
        })
        .collect::<Result<Vec<_>, _>>()?;
    std::thread::sleep(Duration::from_secs(secs));
    for scheduler in started {
        scheduler.stop()?;
    }

    let mut per_job: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for row in db.connection()?.query(
        &format!(
            "SELECT job_id, count(*), count(DISTINCT tick) FROM {runs} GROUP BY job_id ORDER BY 1"
        ),
        &[],
    )? {
        per_job.insert(row.get(0), (row.get(1), row.get(2)));
    }
    println!("\nruns per job (every tick once: runs = distinct ticks):");
    for (job, (runs, ticks)) in &per_job {
        println!("  {job:<16} {runs} runs, {ticks} distinct ticks");
    }
    db.connection()?
        .batch_execute(&format!("DROP TABLE {runs}; DROP TABLE {claims}"))?;
    Ok(())
}
