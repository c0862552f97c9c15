//! The feature `metrics` through a real Prometheus exporter (`metrics-exporter-prometheus`, as
//! docs/alerts.md sets it up): what the primitives report renders in the Prometheus text format
//! that `promtool check metrics` accepts (names, types, help texts, units), every family is one
//! docs/metrics.md lists, and the renewal slack given buckets has the `_bucket` series the alert
//! rules read. Needs `promtool` (Debian's `prometheus`; .ci/run installs it).

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{db, hand_driven, leader_table, lease_table, wait_for, Tables};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims,
};

/// The metrics docs/metrics.md lists.
fn documented() -> BTreeSet<String> {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .unwrap()
        .lines()
        .filter_map(|line| line.strip_prefix("| `pgtenure_"))
        .map(|rest| format!("pgtenure_{}", rest.split('`').next().unwrap()))
        .collect()
}

#[test]
fn the_metrics_through_a_prometheus_exporter_pass_promtool() {
    // Installed before the first Db is built, which describes every metric to it.
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("pgtenure_lease_renewal_slack_seconds".into()),
            &[0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0],
        )
        .unwrap()
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();

    let mut tables = Tables::new();
    let leases = Leases::new(&db())
        .with_table(&lease_table(&mut tables))
        .unwrap();
    let lease = leases
        .acquire("k", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    assert!(leases
        .try_acquire("k", Duration::from_secs(1))
        .unwrap()
        .is_none());
    wait_for("a renewal", Duration::from_secs(5), || {
        handle
            .render()
            .contains("pgtenure_lease_renewals_total{outcome=\"renewed\"}")
            .then_some(())
    });
    lease.release().unwrap();

    let ticks = TickClaims::new(&db())
        .with_table(&tables.name("ticks"))
        .unwrap();
    ticks.create_table().unwrap();
    let tick = SystemTime::now() - Duration::from_secs(60);
    assert!(ticks
        .claim("job", tick, Duration::from_secs(1))
        .unwrap()
        .is_some());
    let fires = FireClaims::new(&db())
        .with_table(&tables.name("fires"))
        .unwrap();
    fires.create_table().unwrap();
    assert!(fires.claim("f").unwrap());

    let elector = Elector::new(&db())
        .with_table(&leader_table(&mut tables))
        .unwrap()
        .with_name("prometheus-fleet")
        .unwrap();
    assert!(elector.is_leader().unwrap());
    elector.resign().unwrap();

    let (procs, units_table) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_table).unwrap();
    units.create_tables().unwrap();
    units.add(&[Unit::new("p", 0).unwrap()]).unwrap();
    let leaser = Leaser::new(&db(), Arc::new(common::Quiet), hand_driven())
        .unwrap()
        .with_tables(&procs, &units_table)
        .unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    leaser.release().unwrap();
    leaser.delete_process().unwrap();
    // A statement error, by its class.
    let missing = Leases::new(&db())
        .with_table("t_prometheus_missing")
        .unwrap();
    assert!(missing.holder("k").is_err());

    let text = handle.render();
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}): install the Debian package prometheus; .ci/run does")
        });
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every family documented and described; the slack with its buckets.
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap().to_owned())
        .collect();
    assert!(families.len() >= 15, "{families:?}");
    let documented = documented();
    let undocumented: Vec<&String> = families.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "not in docs/metrics.md: {undocumented:?}"
    );
    for family in &families {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} has no help text:\n{text}"
        );
    }
    assert!(
        text.contains("pgtenure_lease_renewal_slack_seconds_bucket{le=\"1\"}"),
        "{text}"
    );
    assert!(
        text.contains("pgtenure_statement_errors_total{class=\"42\"}"),
        "{text}"
    );
}
