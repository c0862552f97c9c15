//! The scheduler against a real PostgreSQL: one run per tick across instances, the database clock
//! deciding when a tick is due, misfires, no overlap, failures reported.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::proxy::{database_addr, Proxy};
use common::{client, db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::schedule::{Job, Misfire, Run, RunResult, Schedule, ScheduleHooks, Scheduler};
use pgtenure::{DbBuilder, Error, TickClaims};

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

/// Spans of each run of a job by `Instant`, recorded by the job itself.
type Spans = Arc<Mutex<Vec<(SystemTime, Instant, Instant)>>>;

fn slow_job(id: &str, period: Duration, takes: Duration, spans: &Spans) -> Job {
    let spans = spans.clone();
    Job::new(id, Schedule::every(period).unwrap(), move |run| {
        let from = Instant::now();
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
        assert!(
            spans.iter().all(|(_, from, _)| *from < stopping),
            "a run started after stop() was called"
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
    });
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
    // Issue 23: never two runs of one job at once anywhere. A job every 200 ms (busy for 200 ms by
    // default) whose runs take 1 s, on two instances: each run extends its busy period while it
    // goes on, so the other instance claims no later tick before it ends.
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
                    Duration::from_millis(200),
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
