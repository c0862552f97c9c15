//! The feature `metrics`: with a recording recorder installed, every metric of docs/metrics.md moves
//! as the primitives work, with the documented labels, and nothing outside that table is reported.
//!
//! The recorder is global and the counters are process-wide, so the steps run one after another in
//! one test and compare what moved across each step.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use common::{db, hand_driven, leader_table, lease_table, url, wait_for, Tables};
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
};
use parking_lot::Mutex;
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::schedule::{Job, Misfire, Schedule, Scheduler};
use pgtenure::{
    elector::Elector,
    fire_claims::FireClaims,
    leases::{LeaseLoss, Leases},
    semaphores::Semaphore,
    tick_claims::TickClaims,
    Db,
};

/// A metric and its labels, sorted: `name{k="v",...}`.
type Series = String;

/// A recorder that keeps every series: counters and gauges at their value, histograms as how many
/// samples they got.
#[derive(Default)]
struct Seen {
    counters: Mutex<BTreeMap<Series, Arc<AtomicU64>>>,
    gauges: Mutex<BTreeMap<Series, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<Series, Arc<Samples>>>,
}

#[derive(Default)]
struct Samples(AtomicU64);

impl HistogramFn for Samples {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The installed recorder.
struct Recording(&'static Seen);

fn series(key: &Key) -> Series {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={:?}", l.key(), l.value()))
        .collect();
    labels.sort();
    if labels.is_empty() {
        key.name().to_owned()
    } else {
        format!("{}{{{}}}", key.name(), labels.join(","))
    }
}

impl Recorder for Recording {
    fn describe_counter(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<metrics::Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.0.counters.lock();
        Counter::from_arc(counters.entry(series(key)).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.0.gauges.lock();
        Gauge::from_arc(gauges.entry(series(key)).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.0.histograms.lock();
        Histogram::from_arc(histograms.entry(series(key)).or_default().clone())
    }
}

impl Seen {
    fn get() -> &'static Seen {
        static SEEN: OnceLock<&'static Seen> = OnceLock::new();
        SEEN.get_or_init(|| {
            let seen: &'static Seen = Box::leak(Box::default());
            metrics::set_global_recorder(Recording(seen))
                .expect("the only recorder of this test binary");
            seen
        })
    }

    /// Every series, as of now.
    fn now(&self) -> BTreeMap<Series, f64> {
        let mut values = BTreeMap::new();
        for (series, n) in self.counters.lock().iter() {
            values.insert(series.clone(), n.load(Ordering::SeqCst) as f64);
        }
        for (series, bits) in self.gauges.lock().iter() {
            values.insert(series.clone(), f64::from_bits(bits.load(Ordering::SeqCst)));
        }
        for (series, samples) in self.histograms.lock().iter() {
            values.insert(series.clone(), samples.0.load(Ordering::SeqCst) as f64);
        }
        values
    }

    /// How much each series moved while `f` ran (gauges: their value after it).
    fn across<T>(&self, f: impl FnOnce() -> T) -> (T, Moved) {
        let before = self.now();
        let out = f();
        let after = self.now();
        (out, Moved { before, after })
    }
}

struct Moved {
    before: BTreeMap<Series, f64>,
    after: BTreeMap<Series, f64>,
}

impl Moved {
    /// How much `series` grew.
    fn by(&self, series: &str) -> f64 {
        self.after.get(series).copied().unwrap_or(0.0)
            - self.before.get(series).copied().unwrap_or(0.0)
    }

    /// The value of `series` afterwards.
    fn value(&self, series: &str) -> Option<f64> {
        self.after.get(series).copied()
    }

    fn assert_by(&self, series: &str, expected: f64) {
        assert_eq!(
            self.by(series),
            expected,
            "{series} moved by {} (expected {expected}); all that moved: {:?}",
            self.by(series),
            self.moved()
        );
    }

    fn assert_grew(&self, series: &str) {
        assert!(
            self.by(series) > 0.0,
            "{series} did not move; all that moved: {:?}",
            self.moved()
        );
    }

    fn moved(&self) -> BTreeMap<&str, f64> {
        self.after
            .keys()
            .map(|k| (k.as_str(), self.by(k)))
            .filter(|(_, by)| *by != 0.0)
            .collect()
    }
}

/// The metric names docs/metrics.md lists.
fn documented() -> BTreeSet<String> {
    include_str!("../docs/metrics.md")
        .lines()
        .filter_map(|line| line.strip_prefix("| `pgtenure_"))
        .map(|rest| format!("pgtenure_{}", &rest[..rest.find('`').unwrap()]))
        .collect()
}

#[test]
fn every_documented_metric_moves_as_the_primitives_work() {
    let seen = Seen::get();
    let mut tables = Tables::new();
    leases(seen, &mut tables);
    semaphores(seen, &mut tables);
    claims(seen, &mut tables);
    election(seen, &mut tables);
    membership(seen, &mut tables);
    scheduler(seen, &mut tables);
    connections(seen, &mut tables);

    let names: BTreeSet<String> = seen
        .now()
        .keys()
        .map(|series| series.split('{').next().unwrap().to_owned())
        .collect();
    let documented = documented();
    let undocumented: Vec<_> = names.difference(&documented).collect();
    let unseen: Vec<_> = documented.difference(&names).collect();
    assert!(
        undocumented.is_empty(),
        "reported but not in docs/metrics.md: {undocumented:?}"
    );
    assert!(
        unseen.is_empty(),
        "in docs/metrics.md but never reported: {unseen:?}"
    );
    // No label Prometheus sets on every scraped series itself: it would rename ours.
    for series in seen.now().keys() {
        assert!(
            !series.contains("{job=") && !series.contains(",job=") && !series.contains("instance="),
            "{series}: a label Prometheus owns"
        );
    }
}

fn leases(seen: &Seen, tables: &mut Tables) {
    let table = lease_table(tables);
    let family = |owner: &str| {
        Leases::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (holder, other) = (family("holder"), family("other"));
    let ((lease, refused), moved) = seen.across(|| {
        let lease = holder
            .acquire("k", Duration::from_millis(300))
            .unwrap()
            .unwrap();
        let refused = other.try_acquire("k", Duration::from_secs(1)).unwrap();
        (lease, refused)
    });
    assert!(refused.is_none());
    moved.assert_by("pgtenure_lease_acquires_total{outcome=\"granted\"}", 1.0);
    moved.assert_by("pgtenure_lease_acquires_total{outcome=\"refused\"}", 1.0);
    assert_eq!(moved.value("pgtenure_leases_held"), Some(1.0));

    // Renewals every 100 ms; then an operator's release makes the next one refused.
    let (_, moved) = seen.across(|| {
        wait_for("two renewals", Duration::from_secs(5), || {
            let now = seen.now();
            let renewed = now
                .get("pgtenure_lease_renewals_total{outcome=\"renewed\"}")
                .copied()
                .unwrap_or(0.0);
            (renewed >= 2.0).then_some(())
        });
        assert!(other.force_release("k").unwrap());
        let reason = lease.lost().recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(reason, LeaseLoss::Refused);
        lease.release().unwrap();
    });
    moved.assert_grew("pgtenure_lease_renewal_duration_seconds");
    moved.assert_grew("pgtenure_lease_renewal_slack_seconds");
    moved.assert_by("pgtenure_lease_renewals_total{outcome=\"refused\"}", 1.0);
    moved.assert_by("pgtenure_lease_losses_total{reason=\"refused\"}", 1.0);
    assert_eq!(moved.value("pgtenure_leases_held"), Some(0.0));

    // A raw renewal: each key counts.
    let (_, moved) = seen.across(|| {
        holder.try_acquire("raw", Duration::from_secs(5)).unwrap();
        holder
            .renew(&["raw", "never-held"], Duration::from_secs(5))
            .unwrap();
    });
    moved.assert_by("pgtenure_lease_renewals_total{outcome=\"renewed\"}", 1.0);
    moved.assert_by("pgtenure_lease_renewals_total{outcome=\"refused\"}", 1.0);
    let missing = Leases::new(&db())
        .with_table(&tables.name("missing"))
        .unwrap();
    let (_, moved) = seen.across(|| missing.renew(&["k"], Duration::from_secs(1)).unwrap_err());
    moved.assert_by("pgtenure_lease_renewals_total{outcome=\"failed\"}", 1.0);
    // An undefined table is class 42.
    moved.assert_by("pgtenure_statement_errors_total{class=\"42\"}", 1.0);
}

fn semaphores(seen: &Seen, tables: &mut Tables) {
    let semaphore = Semaphore::new(&db())
        .with_table(&tables.name("sema"))
        .unwrap();
    semaphore.create_table().unwrap();
    let ((permit, refused), moved) = seen.across(|| {
        let permit = semaphore.acquire("k", 1, Duration::from_secs(5)).unwrap();
        let refused = semaphore.acquire("k", 1, Duration::from_secs(5)).unwrap();
        (permit, refused)
    });
    assert!(permit.is_some() && refused.is_none());
    moved.assert_by(
        "pgtenure_semaphore_acquires_total{outcome=\"granted\"}",
        1.0,
    );
    moved.assert_by(
        "pgtenure_semaphore_acquires_total{outcome=\"refused\"}",
        1.0,
    );
    // A permit is a managed lease's tenure: it counts among the leases held.
    assert_eq!(moved.value("pgtenure_leases_held"), Some(1.0));
    permit.unwrap().release().unwrap();
}

fn claims(seen: &Seen, tables: &mut Tables) {
    let ticks = TickClaims::new(&db())
        .with_table(&tables.name("tick"))
        .unwrap();
    ticks.create_table().unwrap();
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let busy = Duration::from_secs(60);
    let far = SystemTime::now() + Duration::from_secs(3600);
    let (_, moved) = seen.across(|| {
        assert!(ticks.claim("job", tick, busy).unwrap().is_some());
        assert!(ticks.claim("job", tick, busy).unwrap().is_none());
        assert!(ticks
            .claim("job", far, busy)
            .unwrap_err()
            .is_invalid_input());
    });
    moved.assert_by("pgtenure_tick_claims_total{outcome=\"won\"}", 1.0);
    moved.assert_by("pgtenure_tick_claims_total{outcome=\"refused\"}", 1.0);
    moved.assert_by("pgtenure_tick_claims_total{outcome=\"not_yet_due\"}", 1.0);

    let fires = FireClaims::new(&db())
        .with_table(&tables.name("fire"))
        .unwrap();
    fires.create_table().unwrap();
    let (_, moved) = seen.across(|| {
        assert!(fires.claim("f@1").unwrap());
        assert!(!fires.claim("f@1").unwrap());
    });
    moved.assert_by("pgtenure_fire_claims_total{outcome=\"won\"}", 1.0);
    moved.assert_by("pgtenure_fire_claims_total{outcome=\"refused\"}", 1.0);
}

/// A table renamed away (its statements fail) until dropped, also when an assertion fails
/// meanwhile: the test's tables are dropped by their names.
struct Away(String);

impl Away {
    fn new(table: &str) -> Away {
        common::client()
            .batch_execute(&format!("ALTER TABLE {table} RENAME TO {table}_away"))
            .unwrap();
        Away(table.to_owned())
    }
}

impl Drop for Away {
    fn drop(&mut self) {
        let table = &self.0;
        let renamed =
            common::client().batch_execute(&format!("ALTER TABLE {table}_away RENAME TO {table}"));
        if let Err(e) = renamed {
            eprintln!("cannot rename {table}_away back: {e}");
        }
    }
}

fn election(seen: &Seen, tables: &mut Tables) {
    let table = leader_table(tables);
    let elector = |holder: &str| {
        Elector::new(&db())
            .with_table(&table)
            .unwrap()
            .with_name("metrics-fleet")
            .unwrap()
            .with_holder(holder)
            .unwrap()
    };
    let (a, b) = (elector("a"), elector("b"));
    let (_, moved) = seen.across(|| {
        assert!(a.is_leader().unwrap());
        assert!(a.is_leader().unwrap());
        assert!(!b.is_leader().unwrap());
    });
    let fleet = "fleet=\"metrics-fleet\"";
    moved.assert_by(
        &format!("pgtenure_leader_polls_total{{{fleet},outcome=\"leading\"}}"),
        2.0,
    );
    moved.assert_by(
        &format!("pgtenure_leader_polls_total{{{fleet},outcome=\"following\"}}"),
        1.0,
    );
    moved.assert_by(&format!("pgtenure_leader_terms_won_total{{{fleet}}}"), 1.0);
    // Both electors share the process's gauge: the last poll was b's.
    assert_eq!(
        moved.value(&format!("pgtenure_leader{{{fleet}}}")),
        Some(0.0)
    );
    a.resign().unwrap();

    let (_, moved) = seen.across(|| {
        let campaign = b.campaign().unwrap();
        assert!(campaign.is_leading());
        campaign.stop().unwrap();
    });
    moved.assert_by(&format!("pgtenure_leader_terms_won_total{{{fleet}}}"), 1.0);
    moved.assert_by(
        &format!("pgtenure_leader_losses_total{{{fleet},reason=\"stopped\"}}"),
        1.0,
    );
    assert_eq!(
        moved.value(&format!("pgtenure_leader{{{fleet}}}")),
        Some(0.0)
    );

    // A polling leader that resigns leads no more: its gauge says so before any later poll.
    let (_, moved) = seen.across(|| {
        assert!(a.is_leader().unwrap());
        a.resign().unwrap();
    });
    assert_eq!(
        moved.value(&format!("pgtenure_leader{{{fleet}}}")),
        Some(0.0),
        "a resigned leader's gauge"
    );

    // A campaign's failed poll keeps its leadership until the local deadline (the watcher ends
    // it then): the gauge stays 1 meanwhile.
    let steady = Elector::new(&db())
        .with_table(&table)
        .unwrap()
        .with_name("metrics-steady")
        .unwrap()
        .with_holder("a")
        .unwrap()
        .with_ttl(Duration::from_secs(30))
        .unwrap()
        .with_retry_period(Duration::from_millis(100))
        .unwrap();
    let campaign = steady.campaign().unwrap();
    wait_for("the campaign leads", Duration::from_secs(10), || {
        campaign.is_leading().then_some(())
    });
    let steady_fleet = "fleet=\"metrics-steady\"";
    let gauge = format!("pgtenure_leader{{{steady_fleet}}}");
    let failed = format!("pgtenure_leader_polls_total{{{steady_fleet},outcome=\"failed\"}}");
    let away = Away::new(&table);
    let (_, moved) = seen.across(|| {
        wait_for("a failed poll", Duration::from_secs(10), || {
            let now = seen.now();
            now.get(&failed).is_some_and(|n| *n >= 2.0).then_some(())
        })
    });
    assert!(campaign.is_leading(), "still leading until its deadline");
    assert_eq!(
        moved.value(&gauge),
        Some(1.0),
        "a leading campaign's gauge after failed polls"
    );
    drop(away);
    campaign.stop().unwrap();

    let missing = Elector::new(&db())
        .with_table(&tables.name("missing"))
        .unwrap()
        .with_name("metrics-missing")
        .unwrap();
    let (_, moved) = seen.across(|| missing.is_leader().unwrap_err());
    moved.assert_by(
        "pgtenure_leader_polls_total{fleet=\"metrics-missing\",outcome=\"failed\"}",
        1.0,
    );
}

fn membership(seen: &Seen, tables: &mut Tables) {
    let (procs, units_table) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_table).unwrap();
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..6).map(|i| Unit::new("m", i).unwrap()).collect();
    units.add(&all).unwrap();
    let leaser = |config| {
        Leaser::new(&db(), Arc::new(common::Quiet), config)
            .unwrap()
            .with_tables(&procs, &units_table)
            .unwrap()
    };
    let first = leaser(hand_driven());
    let (_, moved) = seen.across(|| {
        first.heartbeat().unwrap();
        first.tick().unwrap();
    });
    moved.assert_by("pgtenure_membership_heartbeats_total{outcome=\"ok\"}", 1.0);
    moved.assert_by("pgtenure_units_claimed_total", 6.0);
    moved.assert_grew("pgtenure_membership_tick_duration_seconds");
    assert_eq!(moved.value("pgtenure_units_owned"), Some(6.0));

    // A second process joins: the first sheds half to it.
    let second = leaser(hand_driven());
    let (_, moved) = seen.across(|| {
        second.heartbeat().unwrap();
        first.tick().unwrap();
    });
    moved.assert_by("pgtenure_units_shed_total", 3.0);
    moved.assert_by("pgtenure_units_lost_total{reason=\"shed\"}", 3.0);
    assert_eq!(moved.value("pgtenure_units_owned"), Some(3.0));
    let (_, moved) = seen.across(|| first.release().unwrap());
    moved.assert_by("pgtenure_units_lost_total{reason=\"released\"}", 3.0);
    // It owns nothing now, without waiting for a tick (a released process ticks no more).
    assert_eq!(moved.value("pgtenure_units_owned"), Some(0.0));

    let lost = Leaser::new(&db(), Arc::new(common::Quiet), hand_driven())
        .unwrap()
        .with_tables(&tables.name("no_procs"), &tables.name("no_units"))
        .unwrap();
    let (_, moved) = seen.across(|| {
        lost.heartbeat().unwrap_err();
        lost.tick().unwrap_err();
    });
    moved.assert_by(
        "pgtenure_membership_heartbeats_total{outcome=\"failed\"}",
        1.0,
    );
    moved.assert_by("pgtenure_membership_tick_failures_total", 1.0);
}

/// A fresh tick-claim table for a scheduler, created.
fn jobs_table(tables: &mut Tables) -> String {
    let table = tables.name("jobs");
    let claims = TickClaims::new(&db()).with_table(&table).unwrap();
    claims.create_table().unwrap();
    table
}

fn scheduler(seen: &Seen, tables: &mut Tables) {
    let table = jobs_table(tables);
    // Every 100 ms with 1 ms of grace, looked at every 10 ms or so: ticks are soon missed.
    let hasty = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_job(
            Job::new(
                "metrics-hasty",
                Schedule::every(Duration::from_millis(100)).unwrap(),
                |_| Ok(()),
            )
            .unwrap()
            .with_grace(Duration::from_millis(1))
            .unwrap(),
        )
        .unwrap();
    let (_, moved) = seen.across(|| {
        wait_for("a missed tick", Duration::from_secs(10), || {
            hasty.run_pending().unwrap();
            let missed = seen.now();
            let missed = missed.get("pgtenure_job_misfires_total{job_id=\"metrics-hasty\"}");
            missed.is_some_and(|n| *n > 0.0).then_some(())
        })
    });
    moved.assert_grew("pgtenure_job_misfires_total{job_id=\"metrics-hasty\"}");

    // A daily job, looked at now: its latest tick (last midnight, UTC) runs once.
    let daily = Schedule::every(Duration::from_secs(86_400)).unwrap();
    let once = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_job(
            Job::new("metrics-daily", daily, |_| Ok(()))
                .unwrap()
                .with_misfire(Misfire::RunOnce {
                    within: Duration::from_secs(2 * 86_400),
                })
                .unwrap(),
        )
        .unwrap();
    let (_, moved) = seen.across(|| assert_eq!(once.run_pending().unwrap(), 1));
    let job = "job_id=\"metrics-daily\"";
    moved.assert_by(
        &format!("pgtenure_job_runs_total{{{job},outcome=\"ok\"}}"),
        1.0,
    );
    moved.assert_by(&format!("pgtenure_job_run_duration_seconds{{{job}}}"), 1.0);
    moved.assert_by(&format!("pgtenure_job_lateness_seconds{{{job}}}"), 1.0);

    let failing = Scheduler::new(&db())
        .with_table(&jobs_table(tables))
        .unwrap()
        .with_job(
            Job::new(
                "metrics-failing",
                Schedule::every(Duration::from_secs(86_400)).unwrap(),
                |_| Err("no".into()),
            )
            .unwrap()
            .with_misfire(Misfire::RunOnce {
                within: Duration::from_secs(2 * 86_400),
            })
            .unwrap(),
        )
        .unwrap();
    let (_, moved) = seen.across(|| failing.run_pending().unwrap());
    moved.assert_by(
        "pgtenure_job_runs_total{job_id=\"metrics-failing\",outcome=\"failed\"}",
        1.0,
    );
}

fn connections(seen: &Seen, tables: &mut Tables) {
    // One connection, held: the next operation waits for it and times out. Built inside: its one
    // connection's mode is counted as it connects (its first statement runs then).
    let fire_t = tables.name("fire");
    let (_, moved) = seen.across(|| {
        let small = Db::builder(&url())
            .unwrap()
            .max_size(1)
            .unwrap()
            .connection_timeout(Duration::from_millis(200))
            .unwrap()
            .build()
            .unwrap();
        let fires = FireClaims::new(&small).with_table(&fire_t).unwrap();
        fires.create_table().unwrap();
        assert!(fires.claim("f@1").unwrap());
        let held = small.connection().unwrap();
        assert!(fires.claim("f@2").unwrap_err().is_connection());
        drop(held);
    });
    moved.assert_grew("pgtenure_pool_wait_seconds");
    moved.assert_by("pgtenure_pool_timeouts_total", 1.0);
    let modes: f64 = ["protocol", "sql", "unprepared"]
        .iter()
        .map(|mode| {
            moved.by(&format!(
                "pgtenure_connection_modes_total{{mode=\"{mode}\"}}"
            ))
        })
        .sum();
    assert_eq!(
        modes,
        1.0,
        "the new pool's one connection: {:?}",
        moved.moved()
    );
}
