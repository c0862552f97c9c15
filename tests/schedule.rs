//! The scheduler against a real PostgreSQL: one run per tick across instances, the database clock
//! deciding when a tick is due, misfires, no overlap, failures reported.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::proxy::{database_addr, Proxy};
use common::{client, db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::postgres::types::Type;
use pgtenure::schedule::{Job, Misfire, Run, RunResult, Schedule, ScheduleHooks, Scheduler};
use pgtenure::{tick_claims::TickClaims, DbBuilder, Error};

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
        // Unnamed, typed here: through PgBouncer in transaction mode, a statement the driver
        // prepares under a name in one transaction may be missing on the server connection that
        // runs it (the lost runs of a clock-step test in the PgBouncer pass: "db error").
        db().connection()?.query_typed(
            &format!("INSERT INTO {runs} (tick, instance) VALUES ($1, $2)"),
            &[(&run.tick(), Type::TIMESTAMPTZ), (&instance, Type::TEXT)],
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
                })
                .unwrap(),
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
                    // Real time is the subject: a run longer than the job's period.
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
    // A job's panic does not end the scheduler's loop.
    assert!(!scheduler.is_finished());
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

/// Spans of each run of a job by `Instant`, recorded by the job itself.
type Spans = Arc<Mutex<Vec<(SystemTime, Instant, Instant)>>>;

fn slow_job(id: &str, period: Duration, takes: Duration, spans: &Spans) -> Job {
    let spans = spans.clone();
    Job::new(id, Schedule::every(period).unwrap(), move |run| {
        let from = Instant::now();
        // Real time is the subject: a run that takes `takes`.
        std::thread::sleep(takes);
        spans.lock().push((run.tick(), from, Instant::now()));
        Ok(())
    })
    .unwrap()
}

#[test]
fn one_scheduler_never_runs_a_job_twice_at_once() {
    // Issue 23, defect 4: a job every 1 s whose run takes 2.5 s, on one scheduler with two
    // workers: the second worker must not start a later tick while the first still runs.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let spans: Spans = Arc::default();
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_job(slow_job(
            "slow",
            Duration::from_secs(1),
            Duration::from_millis(2500),
            &spans,
        ))
        .unwrap()
        .start()
        .unwrap();
    wait_for("three runs", Duration::from_secs(15), || {
        (spans.lock().len() >= 3).then_some(())
    });
    scheduler.stop().unwrap();
    let mut spans = spans.lock().clone();
    spans.sort_by_key(|s| s.1);
    for pair in spans.windows(2) {
        assert!(pair[1].1 >= pair[0].2, "runs overlapped: {pair:?}");
    }
}

/// Waits until `f` is true, at most `timeout`; says whether it became true.
fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        // The poll interval of this bounded wait.
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// Counts what a scheduler reports.
#[derive(Default)]
struct Seen {
    missed: AtomicUsize,
    errors: AtomicUsize,
    panicked: Mutex<Vec<String>>,
}

impl ScheduleHooks for Seen {
    fn missed(&self, _: &str, _: SystemTime) {
        self.missed.fetch_add(1, Ordering::SeqCst);
    }
    fn error(&self, _: &str, _: SystemTime, _: &Error) {
        self.errors.fetch_add(1, Ordering::SeqCst);
    }
    fn panicked(&self, error: &Error) {
        self.panicked.lock().push(error.to_string());
    }
}

#[test]
fn busy_workers_queue_nothing_late_ticks_are_missed_and_stop_claims_nothing_more() {
    // Issue 23, defect 5: a job every 200 ms whose run takes 700 ms, with 1 worker and 1 job, and
    // with the default 2 workers and 2 jobs. Before: due ticks queued without bound, each run later
    // than the one before (30 s late after a minute), and stop() ran the queue out.
    let period = Duration::from_millis(200);
    let takes = Duration::from_millis(700);
    for (workers, jobs) in [(1, 1), (2, 2)] {
        let mut tables = Tables::new();
        let table = claims_table(&mut tables);
        let spans: Spans = Arc::default();
        let seen = Arc::new(Seen::default());
        let mut scheduler = Scheduler::new(&db())
            .with_table(&table)
            .unwrap()
            .with_workers(workers)
            .unwrap()
            .with_hooks(seen.clone());
        for j in 0..jobs {
            scheduler = scheduler
                .with_job(slow_job(&format!("job-{j}"), period, takes, &spans))
                .unwrap();
        }
        let scheduler = scheduler.start().unwrap();
        wait_for("eight runs", Duration::from_secs(30), || {
            (spans.lock().len() >= 8).then_some(())
        });
        let stopping = Instant::now();
        scheduler.stop().unwrap();
        let stopped = Instant::now();
        let stop_took = stopping.elapsed();
        let spans = spans.lock().clone();
        // A run is claimed within the grace (the period, 200 ms) by the claim's clock; it starts
        // after the claim's answer. Queued ticks were seconds late by the eighth run.
        let bound = period + period + Duration::from_millis(800);
        for (tick, from, _) in &spans {
            let started = SystemTime::now() - from.elapsed();
            let late = started.duration_since(*tick).unwrap_or_default();
            assert!(
                late <= bound,
                "{workers} workers, {jobs} jobs: a run started {late:?} after its tick"
            );
        }
        assert!(
            seen.missed.load(Ordering::SeqCst) > 0,
            "the ticks passed over are reported"
        );
        // stop() claims nothing once called and runs no queue out. A worker that had passed its
        // last check of the stop flag before stop() set it may start its run just after the call
        // began (the run is in progress by then, and stop() waits for it): one per worker at most.
        let after_stop = spans
            .iter()
            .filter(|(_, from, _)| *from >= stopping)
            .count();
        assert!(
            after_stop <= workers,
            "{after_stop} runs started after stop() was called ({workers} workers)"
        );
        assert!(
            spans.iter().all(|(_, from, _)| *from < stopped),
            "a run started after stop() returned"
        );
        assert!(
            stop_took < takes + Duration::from_millis(1500),
            "stop() took {stop_took:?}: it waits for the runs in progress only"
        );
    }
}

#[test]
fn a_host_clock_stepping_forward_neither_claims_early_nor_loses_the_fleets_ticks() {
    // Issue 23, defect 6: one instance's clock steps 15 s forward after it learned its offset.
    // Before: it claimed a tick 15 s ahead (raw claims accept a minute), every earlier tick of every
    // instance was refused, and that run started after its own deadline.
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let every = Schedule::every(Duration::from_secs(1)).unwrap();
    let skew_ms = Arc::new(AtomicI64::new(0));
    let started: Vec<_> = (0..2)
        .map(|i| {
            let name = format!("instance-{i}");
            let mut scheduler = Scheduler::new(&db())
                .with_table(&table)
                .unwrap()
                .with_owner(&name)
                .unwrap();
            if i == 0 {
                let skew_ms = skew_ms.clone();
                scheduler = scheduler.with_clock(Arc::new(move || {
                    SystemTime::now() + Duration::from_millis(skew_ms.load(Ordering::SeqCst) as u64)
                }));
            }
            scheduler
                .job("stepped", every.clone(), record(&runs_t, &name))
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("two runs", Duration::from_secs(10), || {
        (count(&runs_t) >= 2).then_some(())
    });
    let stepped_at = common::db_now(&mut client());
    skew_ms.store(15_000, Ordering::SeqCst);
    wait_for(
        "six seconds after the step",
        Duration::from_secs(20),
        || {
            let now = common::db_now(&mut client());
            (now.duration_since(stepped_at).unwrap_or_default() > Duration::from_secs(6))
                .then_some(())
        },
    );
    for scheduler in started {
        scheduler.stop().unwrap();
    }
    let all = runs(&runs_t);
    for (tick, instance, started) in &all {
        assert!(
            started >= tick,
            "{instance} ran tick {tick:?} before it was due, at {started:?}"
        );
    }
    let after_step: BTreeSet<SystemTime> = all
        .iter()
        .map(|(tick, _, _)| *tick)
        .filter(|tick| *tick > stepped_at + Duration::from_secs(1))
        .filter(|tick| *tick <= stepped_at + Duration::from_secs(6))
        .collect();
    assert!(
        after_step.len() >= 4,
        "the fleet ran {} of the 5 ticks after the step: {all:?}",
        after_step.len()
    );
}

#[test]
fn run_once_runs_the_latest_tick_missed_in_an_outage_once_the_database_is_back() {
    // Issue 23, defect 7: the database refuses connections for 7 s; a job every 2 s with
    // RunOnce { within: 30 s }. Before: the failed claims went to the error hook and none of the
    // outage's ticks ran after recovery.
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let mut proxy = Proxy::start(0, database_addr()).unwrap();
    let port = proxy.port();
    let via = DbBuilder::from_config(proxy.config())
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap();
    let seen = Arc::new(Seen::default());
    let period = Duration::from_secs(2);
    let job = Job::new("outage", Schedule::every(period).unwrap(), {
        let (runs_t, name) = (runs_t.clone(), "only".to_owned());
        record(&runs_t, &name)
    })
    .unwrap()
    .with_misfire(Misfire::RunOnce {
        within: Duration::from_secs(30),
    })
    .unwrap();
    let scheduler = Scheduler::new(&via)
        .with_table(&table)
        .unwrap()
        .with_hooks(seen.clone())
        .with_job(job)
        .unwrap()
        .start()
        .unwrap();
    wait_for("a first run", Duration::from_secs(10), || {
        (count(&runs_t) >= 1).then_some(())
    });
    // Down from just after a tick for 7.2 s: the last tick of the outage is then 1.2 s old, past
    // the 1 s grace, and no claim of it is in flight when the database comes back.
    let tick_after = |t: SystemTime| {
        let ms = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms - ms % 2000 + 2000)
    };
    let next = tick_after(common::db_now(&mut client()));
    wait_for("the next tick", Duration::from_secs(5), || {
        (common::db_now(&mut client()) >= next + Duration::from_millis(100)).then_some(())
    });
    drop(proxy);
    let down_from = common::db_now(&mut client());
    let up_at = next + Duration::from_millis(7200);
    wait_for("the end of the outage", Duration::from_secs(15), || {
        (common::db_now(&mut client()) >= up_at).then_some(())
    });
    proxy = Proxy::start(port, database_addr()).unwrap();
    let latest_missed = up_at - Duration::from_millis(1200);
    let found = wait_until(Duration::from_secs(10), || {
        runs(&runs_t)
            .iter()
            .any(|(tick, _, _)| *tick == latest_missed)
    });
    assert!(
        found,
        "the latest missed tick {latest_missed:?} did not run (outage from {down_from:?} to \
         {up_at:?}): {:?}",
        runs(&runs_t)
    );
    scheduler.stop().unwrap();
    drop(proxy);
    assert!(
        seen.errors.load(Ordering::SeqCst) > 0,
        "the outage's claims failed"
    );
    let in_outage: Vec<_> = runs(&runs_t)
        .into_iter()
        .filter(|(tick, _, _)| *tick > down_from && *tick < up_at)
        .collect();
    assert_eq!(
        in_outage.len(),
        1,
        "only the latest missed tick runs: {in_outage:?}"
    );
}

#[test]
fn a_panic_in_the_schedulers_own_threads_is_reported_and_the_job_goes_on() {
    // Issue 23, defect 8: a panic in the timer thread killed it silently (the job never ran again,
    // no hook fired). A hook that panics stands for a bug of the scheduler's own code here.
    struct PanicsOnce {
        seen: Seen,
        ran: AtomicUsize,
    }
    impl ScheduleHooks for PanicsOnce {
        fn started(&self, _: &Run) {
            self.ran.fetch_add(1, Ordering::SeqCst);
        }
        fn missed(&self, _: &str, _: SystemTime) {
            if self.seen.missed.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a hook's bug");
            }
        }
        fn panicked(&self, error: &Error) {
            self.seen.panicked(error);
        }
    }
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let hooks = Arc::new(PanicsOnce {
        seen: Seen::default(),
        ran: AtomicUsize::new(0),
    });
    // A job every 100 ms taking 250 ms on one worker misses ticks all the time.
    let spans: Spans = Arc::default();
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_workers(1)
        .unwrap()
        .with_hooks(hooks.clone())
        .with_job(slow_job(
            "slow",
            Duration::from_millis(100),
            Duration::from_millis(250),
            &spans,
        ))
        .unwrap()
        .start()
        .unwrap();
    wait_for("the panic reported", Duration::from_secs(10), || {
        (!hooks.seen.panicked.lock().is_empty()).then_some(())
    });
    let ran = hooks.ran.load(Ordering::SeqCst);
    wait_for("runs after the panic", Duration::from_secs(10), || {
        (hooks.ran.load(Ordering::SeqCst) >= ran + 3).then_some(())
    });
    scheduler.stop().unwrap();
    let panicked = hooks.seen.panicked.lock().clone();
    assert!(panicked[0].contains("a hook's bug"), "{panicked:?}");
}

#[test]
fn a_run_longer_than_its_busy_period_keeps_the_job_busy_fleet_wide() {
    // Issue 23: never two runs of one job at once anywhere. A job every 400 ms (busy for 400 ms by
    // default) whose runs take 1 s, on two instances: each run extends its busy period while it
    // goes on, so the other instance claims no later tick before it ends. (With 200 ms, a run
    // whose extensions were starved for 200 ms on a loaded machine lapsed, as designed: past its
    // deadline the job is free again.)
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let spans: Spans = Arc::default();
    let started: Vec<_> = (0..2)
        .map(|i| {
            Scheduler::new(&db())
                .with_table(&table)
                .unwrap()
                .with_owner(&format!("instance-{i}"))
                .unwrap()
                .with_job(slow_job(
                    "long",
                    Duration::from_millis(400),
                    Duration::from_secs(1),
                    &spans,
                ))
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("four runs", Duration::from_secs(20), || {
        (spans.lock().len() >= 4).then_some(())
    });
    for scheduler in started {
        scheduler.stop().unwrap();
    }
    let mut spans = spans.lock().clone();
    spans.sort_by_key(|s| s.1);
    for pair in spans.windows(2) {
        assert!(pair[1].1 >= pair[0].2, "runs overlapped: {pair:?}");
    }
}

// Found by an adversarial review: each test reproduced a defect against the contract before its fix.

/// Runs `f` on a thread of its own and waits at most `within` for its answer; `None` if it did not
/// answer in time (the thread is then left behind).
fn within<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
}

#[test]
fn a_missed_hook_that_blocks_neither_holds_stop_past_its_bound_nor_runs_on_the_timer() {
    // ScheduleHooks says hooks are "called on the thread that runs the job", and stop() returns
    // within the stop timeout (plus a clock read). `missed` is called on the timer thread: a hook
    // that is slow there (say it writes a metric to a database that is down) stops every job's
    // ticks and holds stop() for as long as it takes, however short the stop timeout.
    struct SlowMissed {
        entered: pgtenure::crossbeam_channel::Sender<()>,
        release: pgtenure::crossbeam_channel::Receiver<()>,
    }
    impl ScheduleHooks for SlowMissed {
        fn missed(&self, _: &str, _: SystemTime) {
            let _ = self.entered.try_send(());
            let _ = self.release.recv_timeout(Duration::from_secs(20));
        }
    }
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let (entered_tx, entered) = pgtenure::crossbeam_channel::bounded(1);
    let (release_tx, release) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let spans: Spans = Arc::default();
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_workers(1)
        .unwrap()
        .with_stop_timeout(Duration::from_millis(500))
        .unwrap()
        .with_hooks(Arc::new(SlowMissed {
            entered: entered_tx,
            release,
        }))
        // Every 100 ms, taking 350 ms: ticks are missed all the time.
        .with_job(slow_job(
            "slow",
            Duration::from_millis(100),
            Duration::from_millis(350),
            &spans,
        ))
        .unwrap()
        .start()
        .unwrap();
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("a missed tick reported");
    let stopping = Instant::now();
    let stopped = within(Duration::from_secs(5), move || scheduler.stop());
    drop(release_tx);
    assert!(
        stopped.is_some(),
        "stop() with a 500 ms stop timeout had not returned after 5 s: it waits for a `missed` \
         hook running on the timer thread"
    );
    assert!(stopping.elapsed() < Duration::from_secs(5));
}

#[test]
fn run_pending_beside_a_started_scheduler_does_not_stall_it() {
    // run_pending "leaves alone a job that a started scheduler is running"; the reverse: when the
    // timer finds the job in hand of a run_pending call, it waited for a worker to come free, which
    // never woke it, and slept its longest sleep (60 s): a job every 200 ms ran nothing for a
    // minute after one run_pending call.
    //
    // No race decides who takes the tick: the scheduler's one worker is held by a job that runs
    // once (hourly, its latest tick made up at start) until the caller's run of `shared` lets it
    // go, so the timer cannot hand `shared` to a worker before the caller has it, and looks again
    // (woken by the worker coming free) while the caller still has it. The caller then holds the
    // job until the timer has looked.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let by_workers = Arc::new(AtomicUsize::new(0));
    let (entered_tx, entered) = pgtenure::crossbeam_channel::bounded::<()>(1);
    let (release_tx, release) = pgtenure::crossbeam_channel::bounded::<()>(1);
    let blocker = Job::new(
        "blocker",
        Schedule::every(Duration::from_secs(3600)).unwrap(),
        move |_| {
            let _ = entered_tx.try_send(());
            // Bounded: a lost message holds the worker 20 s, not for ever.
            let _ = release.recv_timeout(Duration::from_secs(20));
            Ok(())
        },
    )
    .unwrap()
    .with_misfire(Misfire::RunOnce {
        within: Duration::from_secs(7200),
    })
    .unwrap();
    // Looks of the timer thread at its clock once the blocker was let go: the first is the look
    // that finds `shared` in the caller's hand.
    let let_go = Arc::new(AtomicBool::new(false));
    let timer_looks = Arc::new(AtomicUsize::new(0));
    let clock: pgtenure::schedule::Clock = {
        let (let_go, timer_looks) = (let_go.clone(), timer_looks.clone());
        Arc::new(move || {
            if let_go.load(Ordering::SeqCst)
                && std::thread::current().name() == Some("pgtenure-schedule")
            {
                timer_looks.fetch_add(1, Ordering::SeqCst);
            }
            SystemTime::now()
        })
    };
    let ran_before_caller = Arc::new(AtomicUsize::new(usize::MAX));
    let shared = {
        let (by_workers, ran_before_caller) = (by_workers.clone(), ran_before_caller.clone());
        let (let_go, timer_looks) = (let_go.clone(), timer_looks.clone());
        Job::new(
            "shared",
            Schedule::every(Duration::from_millis(200)).unwrap(),
            move |_| {
                if std::thread::current().name() == Some("pgtenure-schedule-run") {
                    by_workers.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
                ran_before_caller.store(by_workers.load(Ordering::SeqCst), Ordering::SeqCst);
                let_go.store(true, Ordering::SeqCst);
                let _ = release_tx.send(());
                wait_for("the timer's look", Duration::from_secs(20), || {
                    (timer_looks.load(Ordering::SeqCst) > 0).then_some(())
                });
                // Real time is the subject: the timer, past its clock, decides on `shared` within
                // microseconds; this keeps the job in hand well past that.
                std::thread::sleep(Duration::from_millis(200));
                Ok(())
            },
        )
        .unwrap()
    };
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_workers(1)
        .unwrap()
        .with_clock(clock)
        .with_job(blocker)
        .unwrap()
        .with_job(shared)
        .unwrap()
        .start()
        .unwrap();
    entered
        .recv_timeout(Duration::from_secs(10))
        .expect("the blocker taken by the only worker");
    assert_eq!(
        scheduler.scheduler().run_pending().unwrap(),
        1,
        "run_pending won no tick of `shared` (the only worker was busy)"
    );
    assert_eq!(
        ran_before_caller.load(Ordering::SeqCst),
        0,
        "a worker ran `shared` while the only worker was busy"
    );
    let before = by_workers.load(Ordering::SeqCst);
    let resumed = wait_until(Duration::from_secs(5), || {
        by_workers.load(Ordering::SeqCst) >= before + 3
    });
    let after = by_workers.load(Ordering::SeqCst);
    scheduler.stop().unwrap();
    assert!(
        resumed,
        "a job every 200 ms ran {} times in the 5 s after a run_pending step",
        after - before
    );
}

#[test]
fn too_many_workers_is_an_error_not_a_panic() {
    // Invariant 6: nothing panics on bad input. with_workers accepts any non-zero count, and
    // start() then panicked ("capacity overflow", a channel of one slot per worker) before any
    // check; counts in between abort the process on the allocation.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let outcome = std::panic::catch_unwind(|| {
        Scheduler::new(&db())
            .with_table(&table)
            .unwrap()
            .with_workers(usize::MAX)
            .and_then(|s| s.job("j", Schedule::every(Duration::from_secs(1))?, |_| Ok(())))
            .and_then(Scheduler::start)
            .map(|s| s.stop())
    });
    match outcome {
        Ok(result) => assert!(
            result.is_err(),
            "usize::MAX workers were accepted and started"
        ),
        Err(_) => panic!("with_workers(usize::MAX) then start() panicked instead of an error"),
    }
}

#[test]
fn a_claim_in_flight_when_stop_is_called_starts_no_run_after_it() {
    // stop() "claims nothing new once called", and no run may start after it was called (the
    // busy-workers test asserts that too). A worker whose claim was on the wire when stop() was
    // called runs the won tick after stop() was called: stop() then waits for that new run too, or
    // (past its stop timeout) returns while the run starts behind it.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config()).build().unwrap();
    let starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let job = {
        let starts = starts.clone();
        Job::new(
            "inflight",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            move |_| {
                starts.lock().push(Instant::now());
                Ok(())
            },
        )
        .unwrap()
        .with_grace(Duration::from_secs(10))
        .unwrap()
    };
    let scheduler = Scheduler::new(&via)
        .with_table(&table)
        .unwrap()
        .with_job(job)
        .unwrap()
        .start()
        .unwrap();
    wait_for("a first run", Duration::from_secs(10), || {
        (!starts.lock().is_empty()).then_some(())
    });
    // Slow answers from now on: the next tick's claim takes about 1.4 s.
    proxy.set_latency(Duration::from_millis(700));
    let now = common::db_now(&mut client());
    let ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let next = SystemTime::UNIX_EPOCH + Duration::from_millis(ms - ms % 1000 + 1000);
    wait_for(
        "the next tick's claim on the wire",
        Duration::from_secs(5),
        || (common::db_now(&mut client()) >= next + Duration::from_millis(300)).then_some(()),
    );
    let stopping = Instant::now();
    let stopped = scheduler.stop();
    let stop_took = stopping.elapsed();
    // Leave time for a claim that stop() did not wait for to come back. Real time is the subject:
    // no run may start in the 3 s after stop() (a claim in flight takes about 1.4 s), an absence
    // that no state reports.
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<Duration> = starts
        .lock()
        .iter()
        .filter(|from| **from >= stopping)
        .map(|from| from.duration_since(stopping))
        .collect();
    drop(proxy);
    assert!(
        late.is_empty(),
        "runs started {late:?} after stop() was called (stop took {stop_took:?}: {stopped:?})"
    );
}

/// A Db through `proxy` whose waits are short: a 500 ms pool timeout, a 1 s TCP user timeout.
fn short_waits(proxy: &Proxy) -> pgtenure::Db {
    let mut config = proxy.config();
    config.tcp_user_timeout(Duration::from_secs(1));
    DbBuilder::from_config(config)
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap()
}

#[test]
fn stop_while_the_timer_reads_an_unanswering_database_returns_within_its_bound() {
    // Scheduling::stop(): "before that, it waits for the timer's read of the database clock when
    // one is under way (at most the pool's connection timeout)". The host clock steps while the
    // database does not answer (the proxy's blackhole; a hung server or pooler looks the same):
    // the timer measures the database clock again, its read hangs, and stop() joins the timer
    // without bound.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let skew_ms = Arc::new(AtomicI64::new(0));
    let ran = Arc::new(AtomicUsize::new(0));
    let scheduler = {
        let (skew_ms, ran) = (skew_ms.clone(), ran.clone());
        Scheduler::new(&short_waits(&proxy))
            .with_table(&table)
            .unwrap()
            .with_stop_timeout(Duration::from_secs(1))
            .unwrap()
            .with_clock(Arc::new(move || {
                SystemTime::now() + Duration::from_millis(skew_ms.load(Ordering::SeqCst) as u64)
            }))
            .job(
                "stepped",
                Schedule::every(Duration::from_millis(500)).unwrap(),
                move |_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .unwrap()
            .start()
            .unwrap()
    };
    wait_for("a first run", Duration::from_secs(10), || {
        (ran.load(Ordering::SeqCst) >= 1).then_some(())
    });
    proxy.blackhole();
    skew_ms.store(5_000, Ordering::SeqCst);
    // The timer wakes within a period, sees the step and reads the database clock. Real time is
    // the subject until the library tells: a statement hanging in the blackhole (`proxy.held()`)
    // may be a worker's claim, and the timer's own read may have begun before the step; no public
    // state says the timer's read is under way.
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    let stopped = within(Duration::from_secs(6), move || scheduler.stop());
    let took = started.elapsed();
    proxy.heal();
    assert!(
        stopped.is_some(),
        "stop() had not returned after {took:?} (bound: the 500 ms pool timeout for the timer's \
         read, then the 1 s stop timeout)"
    );
}

#[test]
fn dropping_many_schedulers_during_an_outage_does_not_multiply_the_bound() {
    // Invariant 12: "dropping many handles during an outage must not multiply" a bound. Three
    // schedulers whose claims hang on a database that does not answer: each stop() waits its whole
    // stop timeout for a claim (not a run) in flight, one after the other.
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let stop_timeout = Duration::from_secs(2);
    let ran = Arc::new(AtomicUsize::new(0));
    // One proxy per scheduler: the test sees each one's claim hang.
    let proxies: Vec<_> = (0..3)
        .map(|_| Proxy::start(0, database_addr()).unwrap())
        .collect();
    let schedulers: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            let ran = ran.clone();
            Scheduler::new(&short_waits(proxy))
                .with_table(&table)
                .unwrap()
                .with_stop_timeout(stop_timeout)
                .unwrap()
                .job(
                    &format!("job-{i}"),
                    Schedule::every(Duration::from_millis(300)).unwrap(),
                    move |_| {
                        ran.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    },
                )
                .unwrap()
                .start()
                .unwrap()
        })
        .collect();
    wait_for("runs of every job", Duration::from_secs(10), || {
        (ran.load(Ordering::SeqCst) >= 6).then_some(())
    });
    for proxy in &proxies {
        proxy.blackhole();
    }
    wait_for(
        "every scheduler's next claim on the wire, hanging",
        Duration::from_secs(5),
        || proxies.iter().all(|p| p.held() > 0).then_some(()),
    );
    let dropping = Instant::now();
    drop(schedulers);
    let took = dropping.elapsed();
    for proxy in &proxies {
        proxy.heal();
    }
    assert!(
        took < stop_timeout + Duration::from_millis(1500),
        "dropping three schedulers during the outage took {took:?} (stop timeout {stop_timeout:?} \
         each)"
    );
}

#[test]
fn a_hook_that_panics_after_a_run_still_releases_the_runs_tick() {
    // A hook's panic is caught and reported (ScheduleHooks::panicked) "and the thread goes on"; but
    // a panic in `finished` (or `failed`) unwinds past the release of the run's claim, so the job
    // stays busy fleet-wide for its whole busy period: here the next two ticks are refused.
    struct PanicsAfterFirst(AtomicUsize);
    impl ScheduleHooks for PanicsAfterFirst {
        fn finished(&self, _: &Run, _: Duration) {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a hook's bug");
            }
        }
    }
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let ticks: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let job = {
        let ticks = ticks.clone();
        Job::new(
            "busy",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            move |run| {
                ticks.lock().push(run.tick());
                Ok(())
            },
        )
        .unwrap()
        .with_busy(Duration::from_secs(3))
        .unwrap()
    };
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_hooks(Arc::new(PanicsAfterFirst(AtomicUsize::new(0))))
        .with_job(job)
        .unwrap()
        .start()
        .unwrap();
    wait_for("two runs", Duration::from_secs(10), || {
        (ticks.lock().len() >= 2).then_some(())
    });
    scheduler.stop().unwrap();
    let ticks = ticks.lock().clone();
    assert_eq!(
        ticks[1].duration_since(ticks[0]).unwrap(),
        Duration::from_secs(1),
        "the tick after the run whose `finished` hook panicked was refused: {ticks:?}"
    );
}

#[test]
fn an_error_hook_that_panics_does_not_kill_a_worker_silently() {
    // "An internal thread that dies is reported through the hooks and the log, never silently",
    // and panics in the scheduler's threads are caught and reported to `panicked`. A worker calls
    // `error` outside its catch_unwind: a panic there kills the worker unreported, its tick stays
    // counted as in hand, and with one worker nothing runs again (stop() then waits out its
    // timeout for a run that does not exist).
    struct PanicsOnError {
        errors: AtomicUsize,
        panicked: Mutex<Vec<String>>,
    }
    impl ScheduleHooks for PanicsOnError {
        fn error(&self, _: &str, _: SystemTime, _: &Error) {
            if self.errors.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a hook's bug");
            }
        }
        fn panicked(&self, error: &Error) {
            self.panicked.lock().push(error.to_string());
        }
    }
    let mut tables = Tables::new();
    let table = claims_table(&mut tables);
    let hooks = Arc::new(PanicsOnError {
        errors: AtomicUsize::new(0),
        panicked: Mutex::default(),
    });
    let ran = Arc::new(AtomicUsize::new(0));
    let scheduler = {
        let ran = ran.clone();
        Scheduler::new(&db())
            .with_table(&table)
            .unwrap()
            .with_workers(1)
            .unwrap()
            .with_stop_timeout(Duration::from_secs(1))
            .unwrap()
            .with_hooks(hooks.clone())
            .job(
                "j",
                Schedule::every(Duration::from_millis(200)).unwrap(),
                move |_| {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .unwrap()
            .start()
            .unwrap()
    };
    wait_for("a first run", Duration::from_secs(10), || {
        (ran.load(Ordering::SeqCst) >= 1).then_some(())
    });
    // Claims fail while the table is gone: the error hook panics once.
    client()
        .batch_execute(&format!("DROP TABLE {table}"))
        .unwrap();
    wait_for("a failed claim reported", Duration::from_secs(10), || {
        (hooks.errors.load(Ordering::SeqCst) >= 1).then_some(())
    });
    TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let before = ran.load(Ordering::SeqCst);
    let resumed = wait_until(Duration::from_secs(6), || {
        ran.load(Ordering::SeqCst) > before
    });
    let stopped = scheduler.stop();
    let panicked = hooks.panicked.lock().clone();
    assert!(
        resumed,
        "nothing ran in the 6 s after the table was back (panics reported: {panicked:?}; stop: \
         {stopped:?})"
    );
    assert!(!panicked.is_empty(), "the hook's panic was not reported");
}

/// Waits (bounded) until the database clock is `from..to` seconds into a second after `after`
/// (seconds since the epoch); returns that second.
fn wait_for_database_fraction(after: f64, from: f64, to: f64) -> f64 {
    let mut admin = client();
    wait_for(
        "the database clock's fraction",
        Duration::from_secs(10),
        || {
            let at: f64 = admin
                .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
                .unwrap()
                .get(0);
            (at.floor() > after && (from..to).contains(&at.fract())).then_some(at.floor())
        },
    )
}

#[test]
fn a_step_near_the_end_of_a_database_second_runs_that_seconds_tick() {
    // A hand-driven step chose its tick by the scheduler's estimate of this host's offset, which
    // can be off by up to the clock-step threshold, and on a loaded machine by half a slow round
    // trip: near the end of a database second it took the next second's tick for due, which the
    // database refused as not yet due, and the step ran nothing. Here the host's clock moves 90 ms
    // ahead after the offset was learned (below the 100 ms taken for a step).
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let ahead = Arc::new(AtomicI64::new(0));
    let clock = {
        let ahead = ahead.clone();
        Arc::new(move || {
            SystemTime::now() + Duration::from_micros(ahead.load(Ordering::SeqCst) as u64)
        })
    };
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_clock(clock)
        .job(
            "every-second",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            record(&runs_t, "a"),
        )
        .unwrap();
    let mut second = wait_for_database_fraction(0.0, 0.2, 0.6);
    assert_eq!(scheduler.run_pending().unwrap(), 1, "the first step");
    ahead.store(90_000, Ordering::SeqCst);
    for step in 0..3 {
        // The next database second, near its end.
        second = wait_for_database_fraction(second, 0.935, 0.97);
        assert_eq!(
            scheduler.run_pending().unwrap(),
            1,
            "step {step}, late in a database second, ran nothing"
        );
    }
    assert_eq!(count(&runs_t), 4);
}

#[test]
fn a_step_whose_claim_lands_in_the_next_period_runs_the_tick_due_then() {
    // A hand-driven step on a slow link: it read the database clock late in a second, and its claim
    // of that second's tick reached the database in the next one, past the tick's grace (a misfire).
    // The step then runs the tick due by the time the claim landed, instead of nothing.
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config()).build().unwrap();
    let scheduler = Scheduler::new(&via)
        .with_table(&table)
        .unwrap()
        .job(
            "every-second",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            record(&runs_t, "a"),
        )
        .unwrap();
    // The clock read and the claim prepared (one round trip each from now on; the release of a
    // missed claim is not: two), then 100 ms each way.
    let second = wait_for_database_fraction(0.0, 0.1, 0.4);
    assert_eq!(scheduler.run_pending().unwrap(), 1, "the first step");
    proxy.set_latency(Duration::from_millis(100));
    // From .78-.84 of a database second: the clock is read at about .9, the claim of that second's
    // tick lands at about 1.1 (past its 1 s grace: missed); its release (prepared, then run) and
    // the claim of the next second's tick land that one at about 1.7, 0.3 s inside its grace, so
    // a machine slowed by up to that much still runs it (at .65-.75 and 150 ms each way, as this
    // test had it, the second claim landed at 2.0-2.1, and CI's load failed it).
    wait_for_database_fraction(second, 0.78, 0.84);
    assert_eq!(
        scheduler.run_pending().unwrap(),
        1,
        "the tick due when the late claim landed"
    );
    let ticks: Vec<SystemTime> = runs(&runs_t).iter().map(|(tick, _, _)| *tick).collect();
    assert_eq!(ticks.len(), 2, "{ticks:?}");
}

#[test]
fn hand_driven_steps_beside_a_started_scheduler_never_run_a_tick_twice_or_early() {
    // Attack on run_pending's own clock read and its second look after a misfire: a started
    // scheduler, a hand-driven one on a slow link (150 ms each way, so its claims land late and
    // some past their grace), and a hand-driven one whose host clock runs 700 ms ahead and then
    // steps back 2 s, all with jitter and RunOnce on one job every 200 ms. Every tick runs at most
    // once, and never before it was due by the database clock.
    let mut tables = Tables::new();
    let (table, runs_t) = (claims_table(&mut tables), runs_table(&mut tables));
    let every = Schedule::every(Duration::from_millis(200)).unwrap();
    let job = |name: &str| {
        Job::new("job", every.clone(), record(&runs_t, name))
            .unwrap()
            .with_jitter(Duration::from_millis(50))
            .unwrap()
            .with_misfire(Misfire::RunOnce {
                within: Duration::from_millis(500),
            })
            .unwrap()
    };
    let started = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_job(job("started"))
        .unwrap()
        .start()
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let slow_db = DbBuilder::from_config(proxy.config()).build().unwrap();
    let slow = Scheduler::new(&slow_db)
        .with_table(&table)
        .unwrap()
        .with_job(job("slow"))
        .unwrap();
    let ahead = Arc::new(AtomicI64::new(700_000));
    let clock = {
        let ahead = ahead.clone();
        Arc::new(move || {
            let us = ahead.load(Ordering::SeqCst);
            if us >= 0 {
                SystemTime::now() + Duration::from_micros(us as u64)
            } else {
                SystemTime::now() - Duration::from_micros(us.unsigned_abs())
            }
        })
    };
    let skewed = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_clock(clock)
        .with_job(job("skewed"))
        .unwrap();
    proxy.set_latency(Duration::from_millis(150));
    let until = Instant::now() + Duration::from_secs(4);
    let stepping = std::thread::spawn(move || {
        let mut ran = 0;
        while Instant::now() < until {
            ran += slow.run_pending().unwrap_or(0);
        }
        ran
    });
    let mut skewed_ran = 0;
    let mut stepped = false;
    while Instant::now() < until {
        if !stepped && Instant::now() + Duration::from_secs(2) > until {
            ahead.store(-2_000_000, Ordering::SeqCst);
            stepped = true;
        }
        skewed_ran += skewed.run_pending().unwrap();
        // Real time is the subject: a step every 30 ms, as a caller's own loop.
        std::thread::sleep(Duration::from_millis(30));
    }
    let slow_ran = stepping.join().unwrap();
    started.stop().unwrap();
    let runs = runs(&runs_t);
    let ticks: BTreeSet<SystemTime> = runs.iter().map(|(t, _, _)| *t).collect();
    let by = |name: &str| runs.iter().filter(|(_, n, _)| n == name).count();
    println!(
        "{} runs of {} ticks: started {}, slow {} (said {slow_ran}), skewed {} (said {skewed_ran})",
        runs.len(),
        ticks.len(),
        by("started"),
        by("slow"),
        by("skewed")
    );
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice: {runs:?}");
    for (tick, name, at) in &runs {
        assert!(at >= tick, "{name} ran tick {tick:?} early, at {at:?}");
    }
    assert!(runs.len() >= 10, "only {} runs in 4 s", runs.len());
}
