//! Setting up and running the loop: derived names that collide, `run` before the database
//! answers and against missing tables, `spawn` and `stop`, and a panicking reconciler.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{client, db, wait_for, Tables};
use pgtenure::membership::{Hooks, Leaser, Reconciler, Unit, UnitLoss, Units};

use super::{config, Fleet, Recorder};

/// Counts the failures a leaser's loop reports.
#[derive(Default)]
struct Failures(std::sync::atomic::AtomicUsize);

impl Hooks for Failures {
    fn error(&self, _: &pgtenure::Error) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn run_starts_while_the_database_is_unreachable_and_stops_promptly() {
    let fleet = Fleet::new(10);
    let port = Proxy::free_port();
    let via = crate::common::config_at("127.0.0.1", port);
    let lazy = pgtenure::DbBuilder::from_config(via)
        .connection_timeout(Duration::from_millis(300))
        .unwrap()
        .build_lazy()
        .unwrap();
    let mut cfg = config(Duration::from_secs(3));
    cfg.rebalance_interval = Duration::from_millis(100);
    let failures = Arc::new(Failures::default());
    let leaser = Arc::new(
        Leaser::new(&lazy, Arc::new(Recorder::default()), cfg)
            .unwrap()
            .with_tables(&fleet.processes, &fleet.units_table)
            .unwrap()
            .with_hooks(failures.clone()),
    );
    let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let runner = {
        let leaser = leaser.clone();
        thread::spawn(move || leaser.run(&shutdown))
    };
    // Run keeps trying an unreachable database: three failed attempts (each a 300 ms connection
    // timeout) reported, and it neither gave up nor claims readiness.
    wait_for("three failed attempts", Duration::from_secs(15), || {
        (failures.0.load(std::sync::atomic::Ordering::SeqCst) >= 3).then_some(())
    });
    assert!(!leaser.ready(), "no database yet");
    assert!(
        !runner.is_finished(),
        "an unreachable database delays run, it does not stop it"
    );
    let proxy = Proxy::start(port, database_addr()).unwrap();
    wait_for("run to become ready", Duration::from_secs(15), || {
        leaser.ready().then_some(())
    });
    wait_for("run to claim the units", Duration::from_secs(5), || {
        (leaser.owned().len() == 10).then_some(())
    });
    let signalled = Instant::now();
    drop(stop);
    runner.join().unwrap().unwrap();
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(1), "run took {took:?} to stop");
    drop(proxy);
}

#[test]
fn derived_index_names_that_collide_are_refused_or_reported_never_skipped() {
    let mut tables = Tables::new();
    let units_t = tables.name("u");
    // The units table's owner index would be named like the processes table.
    let err = Units::new(&db())
        .with_tables(&format!("{units_t}_owner"), &units_t)
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    // A relation of the fleet's own that takes an index's name is reported by create_tables.
    let procs = tables.name("procs");
    let taken = format!("{units_t}_claimable");
    tables.track(&taken);
    client()
        .batch_execute(&format!("CREATE TABLE {taken} (x int)"))
        .unwrap();
    let err = Units::new(&db())
        .with_tables(&procs, &units_t)
        .unwrap()
        .create_tables()
        .unwrap_err();
    assert!(err.to_string().contains(&taken), "{err}");
    assert_eq!(err.kind(), pgtenure::ErrorKind::Database);
    // The same for a lease table's token sequence.
    let leases_t = tables.name("lease");
    tables.track(&format!("{leases_t}_token_seq"));
    client()
        .batch_execute(&format!("CREATE TABLE {leases_t}_token_seq (x int)"))
        .unwrap();
    let err = pgtenure::leases::Leases::new(&db())
        .with_table(&leases_t)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert!(err.to_string().contains("token_seq"), "{err}");
}

/// A loop that cannot work says so: against tables that do not exist, `run` ends at once with the
/// error (it used to retry with backoff forever and return `Ok` at shutdown), and a loop stopped
/// before its database ever answered returns the last error, not `Ok`.
#[test]
fn run_ends_with_a_permanent_error_and_never_returns_ok_after_failing_all_along() {
    let mut tables = Tables::new();
    let missing = Leaser::new(
        &crate::common::db(),
        Arc::new(Recorder::default()),
        config(Duration::from_secs(3)),
    )
    .unwrap()
    .with_tables(&tables.name("no_procs"), &tables.name("no_units"))
    .unwrap();
    let (_stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let started = Instant::now();
    let err = missing.run(&shutdown).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), pgtenure::ErrorKind::Database, "{err}");
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"), "{err}");

    let nowhere =
        pgtenure::DbBuilder::from_config(crate::common::config_at("127.0.0.1", Proxy::free_port()))
            .connection_timeout(Duration::from_millis(200))
            .unwrap()
            .build_lazy()
            .unwrap();
    let unreachable = Leaser::new(
        &nowhere,
        Arc::new(Recorder::default()),
        config(Duration::from_secs(3)),
    )
    .unwrap();
    // Signalled from the start: the first heartbeat fails, and the loop stops with its error.
    let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    drop(stop);
    let err = unreachable.run(&shutdown).unwrap_err();
    assert!(err.is_connection(), "{err}");
}

/// `spawn` owns the loop's thread: the units are claimed, a second `run` of the same leaser is
/// refused, and `stop` hands every unit over and deletes the process row.
#[test]
fn a_spawned_leaser_runs_refuses_a_second_loop_and_hands_over_on_stop() {
    let fleet = Fleet::new(6);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let (a, recorder) = fleet.leaser(fast);
    let running = a.spawn().unwrap();
    wait_for("the spawned loop to claim", Duration::from_secs(10), || {
        (running.leaser().owned().len() == 6).then_some(())
    });
    let (_never, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let second = running.leaser().run(&shutdown).unwrap_err();
    assert!(second.is_invalid_input(), "{second}");
    assert!(second.to_string().contains("already running"), "{second}");
    assert!(!running.is_finished());
    let id = running.leaser().process_id().to_owned();
    running.stop().unwrap();
    assert_eq!(recorder.lost_for(UnitLoss::Released), 6);
    let ownership = fleet.ownership();
    assert_eq!(ownership[&None].len(), 6, "every unit handed over");
    assert!(!ownership.contains_key(&Some(id.clone())));
    assert!(
        fleet.units.processes().unwrap().iter().all(|p| p.id != id),
        "the process row is gone"
    );
}

/// A reconciler that panics ends the loop instead of hanging it: `stop` returns an error and the
/// leaser can run again.
#[test]
fn a_panicking_reconciler_ends_the_loop_and_stop_says_so() {
    struct Panics;
    impl Reconciler for Panics {
        fn units_gained(&self, _: &[Unit]) {
            panic!("the reconciler's own bug");
        }
        fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
    }
    let fleet = Fleet::new(2);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let running = fleet
        .leaser_with(&db(), Arc::new(Panics), fast)
        .spawn()
        .unwrap();
    let ended = (0..100).any(|_| {
        // The poll interval of a bounded wait (5 s) on the loop's thread ending.
        thread::sleep(Duration::from_millis(50));
        running.is_finished()
    });
    if !ended {
        // Dropping it would wait for the hung loop.
        std::mem::forget(running);
        panic!("the loop hung after the reconciler panicked");
    }
    let err = running.stop().unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
}

/// A second `spawn_shared` of a running leaser is refused before anything starts: the running
/// loop keeps its units.
#[test]
fn a_second_spawn_of_a_running_leaser_is_refused_and_changes_nothing() {
    let fleet = Fleet::new(2);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let (a, _) = fleet.leaser(fast);
    let a = Arc::new(a);
    let running = a.clone().spawn_shared().unwrap();
    wait_for("the loop to claim", Duration::from_secs(10), || {
        (running.leaser().owned().len() == 2).then_some(())
    });
    let err = a.clone().spawn_shared().unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert_eq!(a.owned().len(), 2, "the running loop keeps its units");
    running.stop().unwrap();
    assert!(
        a.clone().spawn_shared().is_ok(),
        "stopped, it may run again"
    );
}

/// Every loop handle stops within its documented bound (as `Leadership::stop` does): a `Running`
/// whose loop is stuck in a statement on a network that stopped forwarding (a blackhole: the
/// kernel acknowledges, so no TCP timeout ends it) returns from `stop` within twice the pool's
/// connection timeout plus 2 s, with a connection error, instead of waiting for the database.
#[test]
fn stop_returns_within_its_bound_while_the_loop_is_stuck_on_the_database() {
    let fleet = Fleet::new(4);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let pool_timeout = Duration::from_millis(500);
    let via = pgtenure::DbBuilder::from_config(proxy.config())
        .max_size(2)
        .unwrap()
        .connection_timeout(pool_timeout)
        .unwrap()
        .build()
        .unwrap();
    let mut cfg = config(Duration::from_secs(1));
    cfg.rebalance_interval = Duration::from_millis(100);
    let running = Leaser::new(&via, Arc::new(Recorder::default()), cfg)
        .unwrap()
        .with_tables(&fleet.processes, &fleet.units_table)
        .unwrap()
        .spawn()
        .unwrap();
    wait_for(
        "the loop to claim the units",
        Duration::from_secs(10),
        || (running.leaser().owned().len() == 4).then_some(()),
    );
    proxy.blackhole();
    let blackholed = Instant::now();
    // No heartbeat succeeds any more: once the liveness deadline has passed, the loop is stuck in
    // a statement (or a connect) that nothing ends.
    wait_for("the loop to be stuck", Duration::from_secs(10), || {
        running.leaser().owned().is_empty().then_some(())
    });
    assert!(!running.is_finished());
    let bound = pool_timeout * 2 + Duration::from_secs(2);
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(running.stop());
    });
    let stopped = rx.recv_timeout(bound + Duration::from_secs(3));
    let took = started.elapsed();
    proxy.heal();
    let stopped = stopped.unwrap_or_else(|_| panic!("stop had not returned after {took:?}"));
    let err = stopped.unwrap_err();
    assert_eq!(err.kind(), pgtenure::ErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("did not stop within"), "{err}");
    // The bound counts from the start of the loop's call in progress, which began about when the
    // network stopped forwarding (or later).
    assert!(
        blackholed.elapsed() + Duration::from_millis(200) >= bound,
        "{took:?}: it waited for the stuck call's bound first"
    );
}

/// Invariant 12: "dropping many handles during an outage must not multiply" a bound. Three
/// spawned leasers whose loops hang on a database that does not answer, dropped together (a
/// `Vec` of them), take about one bound, not one each.
#[test]
fn dropping_many_running_leasers_during_an_outage_does_not_multiply_the_bound() {
    let fleet = Fleet::new(6);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let pool_timeout = Duration::from_millis(500);
    let via = pgtenure::DbBuilder::from_config(proxy.config())
        .max_size(4)
        .unwrap()
        .connection_timeout(pool_timeout)
        .unwrap()
        .build()
        .unwrap();
    let mut cfg = config(Duration::from_secs(1));
    cfg.rebalance_interval = Duration::from_millis(100);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            Leaser::new(&via, Arc::new(Recorder::default()), cfg.clone())
                .unwrap()
                .with_tables(&fleet.processes, &fleet.units_table)
                .unwrap()
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for("every unit claimed", Duration::from_secs(20), || {
        let owned: usize = handles.iter().map(|h| h.leaser().owned().len()).sum();
        (owned == 6).then_some(())
    });
    proxy.blackhole();
    wait_for("every loop to be stuck", Duration::from_secs(10), || {
        handles
            .iter()
            .all(|h| h.leaser().owned().is_empty())
            .then_some(())
    });
    let bound = pool_timeout * 2 + Duration::from_secs(2);
    let dropping = Instant::now();
    drop(handles);
    let took = dropping.elapsed();
    proxy.heal();
    println!("dropping three running leasers during the outage took {took:?}");
    assert!(
        took < bound + Duration::from_millis(1500),
        "dropping three running leasers during the outage took {took:?} (bound {bound:?} each)"
    );
}

/// The stop bound counts the loop's database calls, not the reconciler's: a `units_gained` that
/// runs longer than the bound (the application starting its work) is waited for, and the stop
/// then releases the units and deletes the process row as usual.
#[test]
fn a_slow_reconciler_does_not_eat_into_the_stop_bound() {
    struct Slow {
        started: parking_lot::Mutex<Option<Instant>>,
        gained: std::sync::atomic::AtomicUsize,
    }
    impl Reconciler for Slow {
        fn units_gained(&self, units: &[Unit]) {
            self.gained
                .fetch_add(units.len(), std::sync::atomic::Ordering::SeqCst);
            *self.started.lock() = Some(Instant::now());
            // Real time is the subject: a callback longer than the stop bound.
            thread::sleep(Duration::from_millis(3500));
        }
        fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
    }
    let fleet = Fleet::new(2);
    let pool_timeout = Duration::from_millis(300);
    let short = pgtenure::DbBuilder::from_config(crate::common::url_config())
        .connection_timeout(pool_timeout)
        .unwrap()
        .build()
        .unwrap();
    let slow = Arc::new(Slow {
        started: parking_lot::Mutex::new(None),
        gained: Default::default(),
    });
    let running = fleet
        .leaser_with(&short, slow.clone(), config(Duration::from_secs(10)))
        .spawn()
        .unwrap();
    let started = wait_for("units_gained to begin", Duration::from_secs(10), || {
        *slow.started.lock()
    });
    let bound = pool_timeout * 2 + Duration::from_secs(2);
    // Stop once the callback has run longer than the bound.
    while started.elapsed() < bound + Duration::from_millis(200) {
        // Real time is the subject: the callback runs past the stop bound.
        thread::sleep(Duration::from_millis(20));
    }
    let id = running.leaser().process_id().to_owned();
    running
        .stop()
        .expect("stopped after the callback, units released");
    let owned: i64 = client()
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE process_id = $1::text::uuid",
                fleet.units_table
            ),
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(owned, 0, "the units were given back");
    assert_eq!(slow.gained.load(std::sync::atomic::Ordering::SeqCst), 2);
}
