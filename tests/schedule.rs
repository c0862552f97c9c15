//! The scheduler against a real PostgreSQL: one run per tick across instances, the database clock
//! deciding when a tick is due, misfires, no overlap, failures reported.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::{client, db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::schedule::{Job, Misfire, Run, RunResult, Schedule, ScheduleHooks, Scheduler};
use pgtenure::{Error, TickClaims};

fn claims_table(tables: &mut Tables) -> String {
    let table = tables.name("ticks");
    TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    table
}

/// A table of runs: tick, instance, and the database clock when the run started.
fn runs_table(tables: &mut Tables) -> String {
    let runs = tables.name("runs");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {runs} (tick timestamptz NOT NULL, instance text NOT NULL,
                                  started timestamptz NOT NULL DEFAULT clock_timestamp())"
        ))
        .unwrap();
    runs
}

fn record(runs: &str, instance: &str) -> impl Fn(&Run) -> RunResult {
    let (runs, instance) = (runs.to_owned(), instance.to_owned());
    move |run| {
        db().connection()?.execute(
            &format!("INSERT INTO {runs} (tick, instance) VALUES ($1, $2)"),
            &[&run.tick(), &instance],
        )?;
        Ok(())
    }
}

/// Every run: (tick, instance, started by the database clock), in tick order.
fn runs(runs: &str) -> Vec<(SystemTime, String, SystemTime)> {
    client()
        .query(
            &format!("SELECT tick, instance, started FROM {runs} ORDER BY tick"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn count(runs: &str) -> i64 {
    common::count(&mut client(), runs)
}

/// Three instances, one of them with a clock `skew` ahead, run a job every 250 ms until 20 ticks
/// ran; returns the runs.
fn three_instances(skew: Duration) -> Vec<(SystemTime, String, SystemTime)> {
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let every = Schedule::every(Duration::from_millis(250)).unwrap();
    let started: Vec<_> = (0..3)
        .map(|i| {
            let name = format!("instance-{i}");
            let mut scheduler = Scheduler::new(&db())
                .with_table(&table)
                .unwrap()
                .with_owner(&name)
                .unwrap();
            if i == 0 {
                scheduler = scheduler.with_clock(Arc::new(move || SystemTime::now() + skew));
            }
            scheduler
                .job("job", every.clone(), record(&runs_t, &name))
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("20 ticks to run", Duration::from_secs(30), || {
        (count(&runs_t) >= 20).then_some(())
    });
    for scheduler in started {
        scheduler.stop().unwrap();
    }
    runs(&runs_t)
}

#[test]
fn three_instances_run_every_tick_once() {
    let runs = three_instances(Duration::ZERO);
    let ticks: BTreeSet<SystemTime> = runs.iter().map(|(t, _, _)| *t).collect();
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice: {runs:?}");
    assert!(runs.len() >= 20);
}

#[test]
fn a_fast_clock_neither_runs_early_nor_wins_every_tick() {
    let runs = three_instances(Duration::from_millis(1500));
    let ticks: BTreeSet<SystemTime> = runs.iter().map(|(t, _, _)| *t).collect();
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice");
    for (tick, instance, started) in &runs {
        assert!(
            started >= tick,
            "{instance} ran tick {tick:?} early, at {started:?} by the database clock"
        );
    }
    let fast = runs.iter().filter(|(_, i, _)| i == "instance-0").count();
    println!("the fast instance won {fast} of {} ticks", runs.len());
    assert!(fast < runs.len(), "the fast instance won every tick");
}

/// A cron job every second (six fields) on three instances: each tick, a whole second, runs once
/// and not before it is due by the database clock.
#[test]
fn a_cron_job_runs_each_tick_once_across_instances() {
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let every_second = Schedule::cron("* * * * * *").unwrap();
    let started: Vec<_> = (0..3)
        .map(|i| {
            let name = format!("instance-{i}");
            Scheduler::new(&db())
                .with_table(&table)
                .unwrap()
                .with_owner(&name)
                .unwrap()
                .job("cron", every_second.clone(), record(&runs_t, &name))
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("4 ticks to run", Duration::from_secs(20), || {
        (count(&runs_t) >= 4).then_some(())
    });
    for scheduler in started {
        scheduler.stop().unwrap();
    }
    let runs = runs(&runs_t);
    let ticks: BTreeSet<SystemTime> = runs.iter().map(|(t, _, _)| *t).collect();
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice: {runs:?}");
    for (tick, instance, started) in &runs {
        let since = tick.duration_since(SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(since.subsec_nanos(), 0, "{tick:?} is not a whole second");
        assert!(
            started >= tick,
            "{instance} ran {tick:?} early, at {started:?}"
        );
    }
}

#[test]
fn missed_ticks_are_skipped_or_the_latest_run_once() {
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    // A daily job, looked at now: its latest tick (last midnight, UTC) was missed.
    let daily = Schedule::every(Duration::from_secs(86_400)).unwrap();
    let skip = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .job("daily", daily.clone(), record(&runs_t, "skip"))
        .unwrap();
    assert_eq!(skip.run_pending().unwrap(), 0, "skipped");
    let once = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_job(
            Job::new("daily", daily, record(&runs_t, "once"))
                .unwrap()
                .with_misfire(Misfire::RunOnce {
                    within: Duration::from_secs(2 * 86_400),
                }),
        )
        .unwrap();
    assert_eq!(
        once.run_pending().unwrap(),
        1,
        "the latest missed tick, once"
    );
    assert_eq!(once.run_pending().unwrap(), 0, "and not again");
    assert_eq!(count(&runs_t), 1);
}

#[test]
fn a_long_run_is_never_overlapped_across_instances() {
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let spans: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let started: Vec<_> = (0..2)
        .map(|i| {
            let spans = spans.clone();
            let job = Job::new(
                "long",
                Schedule::every(Duration::from_millis(100)).unwrap(),
                move |_| {
                    let from = Instant::now();
                    std::thread::sleep(Duration::from_millis(350));
                    spans.lock().push((from, Instant::now()));
                    Ok(())
                },
            )
            .unwrap()
            .with_busy(Duration::from_secs(2))
            .unwrap();
            Scheduler::new(&db())
                .with_table(&table)
                .unwrap()
                .with_owner(&format!("instance-{i}"))
                .unwrap()
                .with_job(job)
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("four runs", Duration::from_secs(10), || {
        (spans.lock().len() >= 4).then_some(())
    });
    for scheduler in started {
        scheduler.stop().unwrap();
    }
    let mut spans = spans.lock().clone();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "runs overlapped: {pair:?}");
    }
}

#[test]
fn a_failing_job_is_reported_and_the_scheduler_goes_on() {
    #[derive(Default)]
    struct Count {
        finished: AtomicUsize,
        failed: AtomicUsize,
    }
    impl ScheduleHooks for Count {
        fn finished(&self, _: &Run, _: Duration) {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
        fn failed(&self, _: &Run, error: &Error) {
            assert!(error.to_string().contains("panicked") || error.to_string().contains("error"));
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
    }
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let hooks = Arc::new(Count::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_hooks(hooks.clone())
        .job(
            "flaky",
            Schedule::every(Duration::from_millis(100)).unwrap(),
            move |_| match c.fetch_add(1, Ordering::SeqCst) {
                0 => panic!("the job's own bug"),
                1 => Err("a job's error".into()),
                _ => Ok(()),
            },
        )
        .unwrap()
        .start()
        .unwrap();
    wait_for("a run after the failures", Duration::from_secs(10), || {
        (hooks.finished.load(Ordering::SeqCst) >= 1).then_some(())
    });
    scheduler.stop().unwrap();
    assert_eq!(hooks.failed.load(Ordering::SeqCst), 2);
}

#[test]
fn bad_schedules_and_jobs_are_refused() {
    assert!(Schedule::every(Duration::ZERO)
        .unwrap_err()
        .is_invalid_input());
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    assert!(Job::new(" ", every.clone(), |_| Ok(()))
        .unwrap_err()
        .is_invalid_input());
    let twice = Scheduler::new(&db())
        .job("a", every.clone(), |_| Ok(()))
        .unwrap()
        .job("a", every, |_| Ok(()));
    assert!(twice.unwrap_err().is_invalid_input());
    assert!(Scheduler::new(&db())
        .start()
        .unwrap_err()
        .is_invalid_input());
    assert!(Scheduler::new(&db())
        .with_workers(0)
        .unwrap_err()
        .is_invalid_input());
    for (expr, zone) in [("61 * * * *", "UTC"), ("* * * * *", "Nowhere/Atlantis")] {
        let e = Schedule::cron_in(expr, zone).unwrap_err();
        assert!(e.is_invalid_input(), "{expr} in {zone}: {e}");
    }
    assert!(Schedule::cron("0 0 30 2 *").unwrap_err().is_invalid_input());
}

/// A missing claims table is reported by `start` at once, before any thread runs; one dropped
/// while the scheduler runs is reported to the hooks at every tick, and the scheduler goes on.
#[test]
fn a_permanent_error_ends_start_and_later_ones_reach_the_hooks() {
    let mut tables = Tables::new();
    let missing = tables.name("never_made");
    let every = Schedule::every(Duration::from_millis(100)).unwrap();
    let started = Instant::now();
    let err = Scheduler::new(&db())
        .with_table(&missing)
        .unwrap()
        .job("job", every.clone(), |_| Ok(()))
        .unwrap()
        .start()
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"), "{err}");
    assert!(err.is_permanent());
    assert!(started.elapsed() < Duration::from_secs(5));

    #[derive(Default)]
    struct Errors(Mutex<Vec<String>>);
    impl ScheduleHooks for Errors {
        fn error(&self, job_id: &str, _tick: SystemTime, error: &Error) {
            self.0.lock().push(format!("{job_id}: {error}"));
        }
    }
    let table = claims_table(&mut tables);
    let errors = Arc::new(Errors::default());
    let running = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_hooks(errors.clone())
        .job("job", every, |_| Ok(()))
        .unwrap()
        .start()
        .unwrap();
    client()
        .batch_execute(&format!("DROP TABLE {table}"))
        .unwrap();
    wait_for("an error at a tick", Duration::from_secs(10), || {
        errors.0.lock().first().cloned()
    });
    running.stop().unwrap();
    let first = errors.0.lock()[0].clone();
    assert!(
        first.starts_with("job: ") && first.contains("42P01"),
        "{first}"
    );
}
