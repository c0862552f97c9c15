//! The scheduler under faults: several instances run the same jobs through a faulty network, with
//! host clocks off by seconds and stepping, jobs slower than their period, runs that stall past
//! their deadline, and instances stopped and started again.
//!
//! Each run records its tick and the database clock at its start (directly, not through the faulty
//! network), its span by this process's monotonic clock (ended at its deadline at the latest: the
//! jobs stop by it), and fenced writes to the ledger. Afterwards:
//! - each tick of a job ran at most once fleet-wide;
//! - no run started before its tick by the database clock;
//! - no two runs of one job overlapped anywhere;
//! - every run started within the job's allowed lateness (plus the time to record it);
//! - the ledger proves that no stale run's write landed after a later run wrote;
//! - no run of a stopped instance started after its `stop()` was called, and `stop()` returned
//!   within its bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use pgtenure::schedule::{Job, Misfire, Run, RunResult, Schedule, ScheduleHooks, Scheduler};
use pgtenure::{tick_claims::TickClaims, Db, Error};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{client, db, ledger, Tables};
use crate::harness::{
    assert_landed, inject_faults, mode, proxied_url, run_for, write, Counts, Load, Rng,
};

/// A job of the checker: its period, how long its runs take, and its misfire rule.
struct Spec {
    id: &'static str,
    period_ms: u64,
    takes_ms: (u64, u64),
    misfire: Misfire,
}

static JOBS: [Spec; 3] = [
    Spec {
        id: "fast",
        period_ms: 300,
        takes_ms: (10, 150),
        misfire: Misfire::Skip,
    },
    // Slower than its period: its runs keep the job busy by extending their claims.
    Spec {
        id: "slow",
        period_ms: 400,
        takes_ms: (150, 1200),
        misfire: Misfire::Skip,
    },
    Spec {
        id: "catch-up",
        period_ms: 500,
        takes_ms: (20, 400),
        misfire: Misfire::RunOnce {
            within: Duration::from_secs(3),
        },
    },
];

/// The lateness a run of `spec` may start with (its grace is the default: the period, at most
/// 1 s; RunOnce's window when longer).
fn allowed(spec: &Spec) -> Duration {
    let grace = Duration::from_millis(spec.period_ms.min(1000));
    match spec.misfire {
        Misfire::RunOnce { within } => within.max(grace),
        _ => grace,
    }
}

/// One run, as the job saw it.
#[derive(Debug, Clone)]
struct Span {
    job: &'static str,
    instance: String,
    tick: SystemTime,
    token: i64,
    from: Instant,
    /// When it ended, or its deadline when that came first (it stops by then).
    to: Instant,
    /// When the job's function returned (after a stall, say).
    returned: Arc<Mutex<Option<Instant>>>,
}

/// What every instance shares.
struct Shared {
    spans: Mutex<Vec<Span>>,
    missed: AtomicU64,
    errors: AtomicU64,
    panicked: Mutex<Vec<String>>,
    stalls: AtomicU64,
    counts: Counts,
}

struct Hooks(Arc<Shared>);

impl ScheduleHooks for Hooks {
    fn missed(&self, _: &str, _: SystemTime) {
        self.0.missed.fetch_add(1, Ordering::SeqCst);
    }
    fn error(&self, _: &str, _: SystemTime, _: &Error) {
        self.0.errors.fetch_add(1, Ordering::SeqCst);
    }
    fn panicked(&self, error: &Error) {
        self.0.panicked.lock().push(error.to_string());
    }
}

/// The job's function: records the run, writes through its fence until done or past its deadline,
/// now and then stalls past the deadline (a paused process) and tries one more fenced write.
fn job_fn(
    spec: &'static Spec,
    instance: String,
    direct: Db,
    tables: (String, String),
    shared: Arc<Shared>,
) -> impl Fn(&Run) -> RunResult + Send + Sync + 'static {
    let seed = AtomicU64::new(spec.period_ms);
    move |run| {
        let from = Instant::now();
        let (runs, ledger) = (&tables.0, &tables.1);
        let mut rng = Rng::new(seed.fetch_add(1, Ordering::Relaxed));
        direct.connection()?.execute(
            &format!(
                "INSERT INTO {runs} (job, tick, token, instance, started)
                 VALUES ($1, $2, $3, $4, clock_timestamp())"
            ),
            &[&spec.id, &run.tick(), &run.token(), &instance],
        )?;
        let takes = rng.millis(spec.takes_ms.0, spec.takes_ms.1);
        let key = spec.id;
        let fenced = |counts: &Counts| {
            write(&direct, ledger, key, run.token(), &instance, counts, |tx| {
                run.fence(tx)
            })
        };
        let mut to = None;
        while from.elapsed() < takes {
            if Instant::now() >= run.deadline() {
                to = Some(run.deadline());
                break;
            }
            fenced(&shared.counts);
            // Real time is the subject: a run's fenced write every 10-60 ms.
            thread::sleep(rng.millis(10, 60));
        }
        let to = to.unwrap_or_else(|| Instant::now().min(run.deadline()));
        let returned = Arc::new(Mutex::new(None));
        shared.spans.lock().push(Span {
            job: spec.id,
            instance: instance.clone(),
            tick: run.tick(),
            token: run.token(),
            from,
            to,
            returned: returned.clone(),
        });
        // A stall past the deadline, as a paused process would have: the write after it must
        // be refused if a later run began.
        if rng.below(15) == 0 {
            shared.stalls.fetch_add(1, Ordering::SeqCst);
            let past = run.deadline().saturating_duration_since(Instant::now());
            // Real time is the subject: a stall past the run's deadline.
            thread::sleep(past + rng.millis(50, 400));
            fenced(&shared.counts);
        }
        *returned.lock() = Some(Instant::now());
        Ok(())
    }
}

/// A started instance and when it was stopped.
struct Instance {
    name: String,
    started: Option<pgtenure::schedule::Scheduling>,
}

#[allow(clippy::too_many_arguments)]
fn start(
    name: &str,
    via: &Db,
    direct: &Db,
    table: &str,
    tables: &(String, String),
    skew_ms: &Arc<AtomicI64>,
    shared: &Arc<Shared>,
) -> Instance {
    let skew = skew_ms.clone();
    let mut scheduler = Scheduler::new(via)
        .with_table(table)
        .unwrap()
        .with_owner(name)
        .unwrap()
        .with_workers(2)
        .unwrap()
        .with_stop_timeout(Duration::from_secs(3))
        .unwrap()
        .with_hooks(Arc::new(Hooks(shared.clone())))
        .with_clock(Arc::new(move || {
            let ms = skew.load(Ordering::SeqCst);
            let now = SystemTime::now();
            if ms >= 0 {
                now + Duration::from_millis(ms as u64)
            } else {
                now - Duration::from_millis(ms.unsigned_abs())
            }
        }));
    for spec in &JOBS {
        let job = Job::new(
            spec.id,
            Schedule::every(Duration::from_millis(spec.period_ms)).unwrap(),
            job_fn(
                spec,
                name.to_owned(),
                direct.clone(),
                tables.clone(),
                shared.clone(),
            ),
        )
        .unwrap()
        .with_misfire(spec.misfire)
        .unwrap();
        scheduler = scheduler.with_job(job).unwrap();
    }
    Instance {
        name: name.to_owned(),
        started: Some(scheduler.start().unwrap()),
    }
}

#[test]
fn schedulers_under_random_faults_run_each_tick_once_never_early_and_never_beside_another_run() {
    let mut tables = Tables::new();
    let table = tables.name("sched");
    TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let runs = tables.name("sched_runs");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {runs} (job text NOT NULL, tick timestamptz NOT NULL, token bigint NOT NULL,
                                  instance text NOT NULL, started timestamptz NOT NULL)"
        ))
        .unwrap();
    let ledger = ledger::create(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("schedulers");
    let via = Db::builder(&proxied_url(&proxy, &app))
        .unwrap()
        .connection_timeout(Duration::from_secs(1))
        .unwrap()
        .statement_mode(mode(0))
        .build()
        .unwrap();
    let direct = db();
    let shared = Arc::new(Shared {
        spans: Mutex::default(),
        missed: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        panicked: Mutex::default(),
        stalls: AtomicU64::new(0),
        counts: Counts::default(),
    });
    let duration = run_for();
    let until = Instant::now() + duration;
    let _load = Load::start(3);
    let pair = (runs.clone(), ledger.clone());
    // Four instances, clocks off by -20 s, 0, +7 s and +40 s to begin with.
    let skews: Vec<Arc<AtomicI64>> = [-20_000, 0, 7_000, 40_000]
        .into_iter()
        .map(|ms| Arc::new(AtomicI64::new(ms)))
        .collect();
    let mut generation = 0;
    let mut instances: Vec<Instance> = skews
        .iter()
        .enumerate()
        .map(|(i, skew)| {
            start(
                &format!("instance-{i}-0"),
                &via,
                &direct,
                &table,
                &pair,
                skew,
                &shared,
            )
        })
        .collect();
    // Clock steps and restarts, beside the network faults.
    let stops: Arc<Mutex<Vec<(String, Instant, Duration)>>> = Arc::default();
    let steps = Arc::new(AtomicU64::new(0));
    let chaos = {
        let (skews, steps) = (skews.clone(), steps.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(91);
            while Instant::now() < until {
                // Real time is the subject: a clock step every 0.5-2.5 s.
                thread::sleep(rng.millis(500, 2500));
                let skew = &skews[rng.below(skews.len() as u64) as usize];
                let by = rng.below(30_000) as i64 - 15_000;
                skew.fetch_add(by, Ordering::SeqCst);
                steps.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let restarter = {
        let stops = stops.clone();
        let (via, direct, table, pair, shared) = (
            via.clone(),
            direct.clone(),
            table.clone(),
            pair.clone(),
            shared.clone(),
        );
        let skews = skews.clone();
        thread::spawn(move || {
            let mut rng = Rng::new(17);
            while Instant::now() < until {
                // Real time is the subject: a fault every 1.5-4 s.
                thread::sleep(rng.millis(1500, 4000));
                if Instant::now() >= until {
                    break;
                }
                let i = rng.below(instances.len() as u64) as usize;
                let instance = &mut instances[i];
                if let Some(running) = instance.started.take() {
                    let called = Instant::now();
                    let outcome = running.stop();
                    let took = called.elapsed();
                    // Runs still going after the stop timeout are reported, not waited for.
                    if let Err(e) = outcome {
                        assert!(e.to_string().contains("runs still going"), "stop: {e}");
                    }
                    stops.lock().push((instance.name.clone(), called, took));
                }
                generation += 1;
                *instance = start(
                    &format!("instance-{i}-{generation}"),
                    &via,
                    &direct,
                    &table,
                    &pair,
                    &skews[i],
                    &shared,
                );
            }
            for mut instance in instances {
                if let Some(running) = instance.started.take() {
                    let called = Instant::now();
                    let _ = running.stop();
                    stops
                        .lock()
                        .push((instance.name.clone(), called, called.elapsed()));
                }
            }
        })
    };
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 23);
    chaos.join().unwrap();
    restarter.join().unwrap();

    // Each tick ran at most once, never before it was due by the database clock, and within the
    // lateness the job allows (plus what recording it may take under load).
    let recorded: Vec<(String, SystemTime, String, SystemTime)> = client()
        .query(
            &format!("SELECT job, tick, instance, started FROM {runs} ORDER BY job, tick"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let mut twice = Vec::new();
    for pair in recorded.windows(2) {
        if pair[0].0 == pair[1].0 && pair[0].1 == pair[1].1 {
            twice.push(pair.to_vec());
        }
    }
    assert!(twice.is_empty(), "ticks run twice: {twice:?}");
    let record_slack = Duration::from_secs(1);
    let mut worst_late: BTreeMap<&str, Duration> = BTreeMap::new();
    for (job, tick, instance, started) in &recorded {
        assert!(
            started >= tick,
            "{instance} ran {job}'s tick {tick:?} before it was due, at {started:?}"
        );
        let spec = JOBS.iter().find(|s| s.id == job).unwrap();
        let late = started.duration_since(*tick).unwrap();
        let worst = worst_late.entry(spec.id).or_default();
        *worst = (*worst).max(late);
        assert!(
            late <= allowed(spec) + record_slack,
            "{instance} started {job}'s tick {tick:?} {late:?} late (allowed {:?})",
            allowed(spec)
        );
    }
    // No two runs of one job at once, anywhere.
    let mut spans = shared.spans.lock().clone();
    spans.sort_by_key(|s| (s.job, s.from));
    for pair in spans.windows(2) {
        if pair[0].job == pair[1].job {
            assert!(
                pair[1].from >= pair[0].to,
                "two runs of {} at once: {:?} and {:?}",
                pair[0].job,
                pair[0],
                pair[1]
            );
        }
    }
    // One instance never starts a job while its own previous run of it is still going, whatever
    // the busy period says (a run that stalled past its deadline included).
    let mut by_instance = spans.clone();
    by_instance.sort_by(|a, b| (&a.instance, a.job, a.from).cmp(&(&b.instance, b.job, b.from)));
    for pair in by_instance.windows(2) {
        if pair[0].job == pair[1].job && pair[0].instance == pair[1].instance {
            let returned = pair[0].returned.lock().unwrap_or(pair[0].to);
            assert!(
                pair[1].from >= returned,
                "{} started {} again while its previous run was still going: {:?} and {:?}",
                pair[0].instance,
                pair[0].job,
                pair[0],
                pair[1]
            );
        }
    }
    // Tokens grow with ticks, per job.
    for job in JOBS.iter().map(|s| s.id) {
        let mut of_job: Vec<&Span> = spans.iter().filter(|s| s.job == job).collect();
        of_job.sort_by_key(|s| s.tick);
        for pair in of_job.windows(2) {
            assert!(
                pair[1].token > pair[0].token,
                "{job}: tokens out of tick order: {pair:?}"
            );
        }
    }
    // A stopped instance claims nothing once stop() is called: only the claims already under way
    // (one per worker at most) may still start their runs. stop() kept its bound (3 s for the
    // runs, plus a claim or clock read under way).
    for (name, called, took) in stops.lock().iter() {
        let after = spans
            .iter()
            .filter(|s| &s.instance == name && s.from > *called)
            .count();
        assert!(
            after <= 2,
            "{name} started {after} runs after stop() was called"
        );
        assert!(
            *took < Duration::from_secs(8),
            "{name}: stop() took {took:?}"
        );
    }
    let panicked = shared.panicked.lock().clone();
    assert!(
        panicked.is_empty(),
        "scheduler threads panicked: {panicked:?}"
    );
    let proof = ledger::assert_ordered(&ledger);
    assert_landed(proof.writes, &shared.counts);
    let ran = recorded.len();
    println!(
        "scheduler checker, {duration:?}: {ran} runs ({} fast, {} slow, {} catch-up), 0 ticks run twice, 0 early, 0 overlapping; \
         {} misfires reported, {} claim errors, worst start lateness {worst_late:?}; {} fenced writes, {} stale refused \
         ({} stalls past a deadline); {} clock steps, {} restarts; faults: {faults:?}",
        recorded.iter().filter(|r| r.0 == "fast").count(),
        recorded.iter().filter(|r| r.0 == "slow").count(),
        recorded.iter().filter(|r| r.0 == "catch-up").count(),
        shared.missed.load(Ordering::SeqCst),
        shared.errors.load(Ordering::SeqCst),
        proof.writes,
        shared.counts.refused.load(Ordering::SeqCst),
        shared.stalls.load(Ordering::SeqCst),
        steps.load(Ordering::SeqCst),
        stops.lock().len(),
    );
    assert!(ran >= 10, "only {ran} runs");
}
