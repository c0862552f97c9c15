//! Partitions and crashes during rebalancing: no unit worked by two processes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::registry::{Registry, Worker};
use crate::common::{db, wait_for, Running, Tables};
use pgtenure::membership::{Config, Leaser, NoHooks, Unit, Units};
use pgtenure::DbBuilder;

#[test]
fn partitions_and_crashes_during_rebalancing_never_let_two_processes_work_a_unit() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_t).unwrap();
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..120).map(|i| Unit::new("t", i).unwrap()).collect();
    units.add(&all).unwrap();
    let registry = Arc::new(Registry::default());
    let ttl = Duration::from_millis(800);
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = Duration::from_millis(200);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = ttl * 4;
    let proxies: Vec<Proxy> = (0..3)
        .map(|_| Proxy::start(0, database_addr()).unwrap())
        .collect();
    let leasers: Vec<Arc<Leaser>> = proxies
        .iter()
        .enumerate()
        .map(|(id, proxy)| {
            let via = DbBuilder::from_config(proxy.config())
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .build_lazy()
                .unwrap();
            let worker = Arc::new(Worker {
                registry: registry.clone(),
                id,
                drain_ms: 0,
            });
            Arc::new(
                Leaser::new(&via, worker, config.clone(), Arc::new(NoHooks))
                    .unwrap()
                    .with_tables(&procs, &units_t)
                    .unwrap(),
            )
        })
        .collect();
    let mut running: Vec<Running> = leasers.iter().map(|l| Running::start(l.clone())).collect();
    let owned = |i: usize| leasers[i].owned().len();
    wait_for("40 units each", Duration::from_secs(10), || {
        ((0..3).all(|i| owned(i) == 40)).then_some(())
    });

    // Partition process 0 for three TTLs: it must stop working before the others take over.
    proxies[0].blackhole();
    wait_for(
        "the others to take process 0's units",
        Duration::from_secs(10),
        || (owned(1) + owned(2) == 120).then_some(()),
    );
    assert!(
        leasers[0].owned().is_empty(),
        "the partitioned process still believes it owns units"
    );
    thread::sleep(ttl);
    proxies[0].heal();
    wait_for(
        "process 0 to get its share back",
        Duration::from_secs(10),
        || ((0..3).all(|i| owned(i) == 40)).then_some(()),
    );

    // Cut everyone's connections: nobody loses anything it can renew in time.
    for proxy in &proxies {
        proxy.cut();
    }
    thread::sleep(ttl / 2);

    // Crash process 2 (it stops without releasing): its units move after its TTL.
    let crashed_at = Instant::now();
    // A crashed process works on nothing any more, at once; then its loop stops.
    registry.crashed(2);
    running[2].stop();
    wait_for(
        "the survivors to take process 2's units",
        Duration::from_secs(10),
        || (owned(0) + owned(1) == 120).then_some(()),
    );
    let moved_after = crashed_at.elapsed();
    println!(
        "rebalanced through a partition, a cut and a crash: {} units gained in all, crash absorbed after {moved_after:?}",
        registry.gained.load(Ordering::SeqCst)
    );
    assert!(
        moved_after >= ttl / 2,
        "the crashed process's units moved before its TTL"
    );
    for run in &mut running {
        run.stop();
    }
    assert_eq!(
        registry.violations(),
        0,
        "a unit was worked on by two processes"
    );
}
