//! What the reconciler and the hooks are told, and in which order.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{client, wait_for};
use parking_lot::Mutex;
use pgtenure::membership::{Config, Hooks, Leaser, Reconciler, Unit, UnitLoss};

use super::{assert_disjoint, config, Fleet, Recorder};

/// Counts what the hooks are told.
#[derive(Default)]
struct Metrics {
    claimed: AtomicUsize,
    shed: AtomicUsize,
    ticks: AtomicUsize,
    owned: AtomicUsize,
}

impl Hooks for Metrics {
    fn claimed(&self, units: usize) {
        self.claimed.fetch_add(units, Ordering::SeqCst);
    }
    fn shed(&self, units: usize) {
        self.shed.fetch_add(units, Ordering::SeqCst);
    }
    fn rebalanced(&self, _took: Duration) {
        self.ticks.fetch_add(1, Ordering::SeqCst);
    }
    fn owned(&self, units: usize, _weight: i64) {
        self.owned.store(units, Ordering::SeqCst);
    }
}

#[test]
fn hooks_see_claims_sheds_ticks_and_ownership() {
    let fleet = Fleet::new(30);
    let metrics = Arc::new(Metrics::default());
    let leaser = Leaser::new(
        &fleet.db,
        Arc::new(Recorder::default()),
        config(Duration::from_secs(30)),
    )
    .map(|leaser| leaser.with_hooks(metrics.clone()))
    .unwrap()
    .with_tables(&fleet.processes, &fleet.units_table)
    .unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    leaser.tick().unwrap();
    assert_eq!(metrics.claimed.load(Ordering::SeqCst), 30);
    assert_eq!(metrics.ticks.load(Ordering::SeqCst), 2);
    assert_eq!(metrics.owned.load(Ordering::SeqCst), 30);
    // A second process joins: the first gives back half.
    let (other, _) = fleet.leaser(config(Duration::from_secs(30)));
    other.heartbeat().unwrap();
    leaser.tick().unwrap();
    assert_eq!(metrics.shed.load(Ordering::SeqCst), 15);
    assert_eq!(metrics.owned.load(Ordering::SeqCst), 15);
    assert_eq!(metrics.claimed.load(Ordering::SeqCst), 30);
}

/// Runs once, at the start of the slow drain.
type Hook = Box<dyn FnOnce() + Send>;

/// What the application was told, in the order the calls began, with a slow `units_lost` on demand
/// and a hook that runs at the start of that slow call.
#[derive(Default)]
struct SlowDrain {
    told: Mutex<Vec<(bool, Vec<Unit>)>>,
    slow: Mutex<Option<(Duration, Hook)>>,
}

impl SlowDrain {
    fn working(&self) -> BTreeSet<Unit> {
        crate::common::registry::working(self.told.lock().iter())
    }
}

impl Reconciler for SlowDrain {
    fn units_gained(&self, units: &[Unit]) {
        self.told.lock().push((true, units.to_vec()));
    }
    fn units_lost(&self, units: &[Unit], _reason: UnitLoss) {
        self.told.lock().push((false, units.to_vec()));
        let slow = self.slow.lock().take();
        if let Some((wait, hook)) = slow {
            hook();
            // Real time is the subject: a reconciler slow to drain.
            thread::sleep(wait);
        }
    }
}

#[test]
fn a_slow_units_lost_never_lets_an_older_gain_arrive_after_a_newer_loss() {
    let fleet = Fleet::new(0);
    let u1 = Unit::new("one", 1).unwrap();
    let u2 = Unit::new("two", 2).unwrap();
    fleet.units.add(std::slice::from_ref(&u1)).unwrap();
    let proxy = Arc::new(Proxy::start(0, database_addr()).unwrap());
    let slow_db = pgtenure::DbBuilder::from_config(proxy.config())
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap();
    let drain = Arc::new(SlowDrain::default());
    let mut fast = Config::default();
    fast.ttl = Duration::from_millis(400);
    fast.heartbeat_interval = Duration::from_millis(100);
    fast.rebalance_interval = Duration::from_millis(50);
    fast.sweep_cutoff = Duration::from_secs(5);
    let metrics = Arc::new(Metrics::default());
    let leaser = Arc::new(
        Leaser::new(&slow_db, drain.clone(), fast)
            .map(|leaser| leaser.with_hooks(metrics.clone()))
            .unwrap()
            .with_tables(&fleet.processes, &fleet.units_table)
            .unwrap(),
    );
    let mut running = crate::common::Running::start(leaser.clone());
    wait_for("u1 to be worked on", Duration::from_secs(5), || {
        (drain.working() == BTreeSet::from([u1.clone()])).then_some(())
    });
    // The next loss is a slow drain, during which the database becomes unreachable: the leaser's
    // local deadline passes while the tick thread is still draining u1 with u2 just gained.
    let (entered, draining) = pgtenure::crossbeam_channel::bounded::<()>(1);
    *drain.slow.lock() = Some((Duration::from_millis(1200), {
        let proxy = proxy.clone();
        Box::new(move || {
            proxy.blackhole();
            let _ = entered.send(());
        })
    }));
    // One tick now loses u1 and gains u2: u1's drain is slow.
    fleet.units.add(std::slice::from_ref(&u2)).unwrap();
    fleet.units.remove(std::slice::from_ref(&u1)).unwrap();
    draining
        .recv_timeout(Duration::from_secs(5))
        .expect("the slow drain of u1");
    let owner: Option<String> = client()
        .query_one(
            &format!(
                "SELECT process_id::text FROM {} WHERE shard = 2",
                fleet.units_table
            ),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        owner.as_deref(),
        Some(leaser.process_id()),
        "the same tick claimed u2"
    );
    // Another process takes u2 once the leaser's row has expired by the database clock.
    let (other, _) = fleet.leaser(config(Duration::from_secs(30)));
    wait_for(
        "the other process to take u2",
        Duration::from_secs(10),
        || {
            other.heartbeat().unwrap();
            other.tick().unwrap();
            other.owned().contains(&u2).then_some(())
        },
    );
    proxy.heal();
    // The slow drain ends, the watcher's loss is told, and the leaser ticks twice more (live again,
    // having re-read what it owns): then the application works on exactly what the leaser owns.
    wait_for("both losses to be told", Duration::from_secs(10), || {
        (drain.told.lock().len() >= 4).then_some(())
    });
    let seen = metrics.ticks.load(Ordering::SeqCst);
    wait_for("two more ticks", Duration::from_secs(10), || {
        (metrics.ticks.load(Ordering::SeqCst) >= seen + 2).then_some(())
    });
    assert_eq!(
        drain.working(),
        leaser.owned().into_iter().collect::<BTreeSet<_>>(),
        "{:?}",
        drain.told.lock()
    );
    assert!(
        !drain.working().contains(&u2),
        "{:?}: u2 is the other process's",
        drain.told.lock()
    );
    println!("told, in order: {:?}", drain.told.lock());
    running.stop();
    proxy.heal();
}

/// A reconciler whose `units_lost` reports each call to the test and waits for its go-ahead, so the
/// test can look at the database while the application is still draining.
struct Gate {
    calls: pgtenure::crossbeam_channel::Sender<Vec<Unit>>,
    go: pgtenure::crossbeam_channel::Receiver<()>,
}

impl Reconciler for Gate {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, units: &[Unit], _reason: UnitLoss) {
        let _ = self.calls.send(units.to_vec());
        let _ = self.go.recv_timeout(Duration::from_secs(10));
    }
}

#[test]
fn a_shed_unit_stays_owned_until_its_worker_has_been_told() {
    let fleet = Fleet::new(4);
    let (calls, told) = pgtenure::crossbeam_channel::unbounded();
    let (go, gate) = pgtenure::crossbeam_channel::unbounded();
    let shedder = Arc::new(
        Leaser::new(
            &fleet.db,
            Arc::new(Gate { calls, go: gate }),
            config(Duration::from_secs(30)),
        )
        .unwrap()
        .with_tables(&fleet.processes, &fleet.units_table)
        .unwrap(),
    );
    shedder.heartbeat().unwrap();
    shedder.tick().unwrap();
    assert_eq!(shedder.owned().len(), 4);
    // A second process joins: the first must shed two.
    let (joiner, _) = fleet.leaser(config(Duration::from_secs(30)));
    joiner.heartbeat().unwrap();
    joiner.tick().unwrap();
    let ticking = {
        let shedder = shedder.clone();
        thread::spawn(move || shedder.tick().unwrap())
    };
    let lost = told
        .recv_timeout(Duration::from_secs(5))
        .expect("units_lost");
    assert_eq!(lost.len(), 2);
    // The worker is still draining: the units are still the shedder's, nobody can claim them.
    let owners = fleet.ownership();
    let mine = owners
        .get(&Some(shedder.process_id().to_owned()))
        .cloned()
        .unwrap_or_default();
    assert!(
        lost.iter().all(|u| mine.contains(u)),
        "shed before its worker stopped: {owners:?}"
    );
    joiner.heartbeat().unwrap();
    assert_eq!(joiner.tick().unwrap().claimed, 0);
    // Drained: they are given back in the same tick, and the joiner claims them.
    go.send(()).unwrap();
    let step = ticking.join().unwrap();
    assert_eq!(step.shed, 2);
    joiner.heartbeat().unwrap();
    assert_eq!(joiner.tick().unwrap().claimed, 2);
    assert_disjoint(&fleet, &[&*shedder, &joiner]);
}

/// Calls back into its leaser from `units_gained`, once.
#[derive(Default)]
struct CallsBack {
    leaser: std::sync::OnceLock<std::sync::Weak<Leaser>>,
    called: std::sync::atomic::AtomicBool,
    nested: Mutex<Option<pgtenure::Result<usize>>>,
}

impl Reconciler for CallsBack {
    fn units_gained(&self, _units: &[Unit]) {
        if self.called.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(leaser) = self.leaser.get().and_then(std::sync::Weak::upgrade) {
            *self.nested.lock() = Some(leaser.tick().map(|r| r.owned));
        }
    }
    fn units_lost(&self, _units: &[Unit], _reason: UnitLoss) {}
}

#[test]
fn a_reconciler_may_call_back_into_its_leaser() {
    let fleet = Fleet::new(5);
    let reconciler = Arc::new(CallsBack::default());
    let leaser = Arc::new(fleet.leaser_with(
        &fleet.db,
        reconciler.clone(),
        config(Duration::from_secs(30)),
    ));
    reconciler.leaser.set(Arc::downgrade(&leaser)).unwrap();
    leaser.heartbeat().unwrap();
    let (done, finished) = pgtenure::crossbeam_channel::bounded(1);
    let ticking = {
        let leaser = leaser.clone();
        thread::spawn(move || {
            let _ = done.send(leaser.tick().map(|r| r.owned));
        })
    };
    let outer = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("a tick whose reconciler ticks again must not deadlock");
    ticking.join().unwrap();
    assert_eq!(outer.unwrap(), 5);
    let nested = reconciler.nested.lock().take().expect("the callback ran");
    assert_eq!(nested.unwrap(), 5, "the nested tick saw the same units");
}

/// Ticks again from inside `units_lost` and records, still inside it, who the database says owns
/// the units it is draining.
struct TicksWhileDraining {
    leaser: std::sync::OnceLock<std::sync::Weak<Leaser>>,
    units_table: String,
    owners_while_draining: Mutex<Vec<Option<String>>>,
}

impl Reconciler for TicksWhileDraining {
    fn units_gained(&self, _units: &[Unit]) {}
    fn units_lost(&self, units: &[Unit], _reason: UnitLoss) {
        let Some(leaser) = self.leaser.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        if units.is_empty() || !self.owners_while_draining.lock().is_empty() {
            return;
        }
        let _ = leaser.tick();
        let mut c = client();
        let mut owners = Vec::new();
        for unit in units {
            let row = c
                .query_one(
                    &format!(
                        "SELECT process_id::text FROM {} WHERE tenant = $1 AND shard = $2",
                        self.units_table
                    ),
                    &[&unit.tenant, &unit.shard],
                )
                .unwrap();
            owners.push(row.get(0));
        }
        *self.owners_while_draining.lock() = owners;
    }
}

#[test]
fn a_unit_is_given_back_only_once_its_units_lost_returned() {
    let fleet = Fleet::new(10);
    let reconciler = Arc::new(TicksWhileDraining {
        leaser: std::sync::OnceLock::new(),
        units_table: fleet.units_table.clone(),
        owners_while_draining: Mutex::new(Vec::new()),
    });
    let leaser = Arc::new(fleet.leaser_with(
        &fleet.db,
        reconciler.clone(),
        config(Duration::from_secs(30)),
    ));
    reconciler.leaser.set(Arc::downgrade(&leaser)).unwrap();
    leaser.heartbeat().unwrap();
    assert_eq!(leaser.tick().unwrap().owned, 10);
    let (other, _) = fleet.leaser(config(Duration::from_secs(30)));
    other.heartbeat().unwrap();
    // Sheds 5: their units_lost ticks again, and the nested tick must not give them back yet.
    let step = leaser.tick().unwrap();
    assert_eq!(step.lost.len(), 5);
    let owners = reconciler.owners_while_draining.lock().clone();
    assert_eq!(owners.len(), 5);
    assert!(
        owners
            .iter()
            .all(|o| o.as_deref() == Some(leaser.process_id())),
        "given back while their work was still being drained: {owners:?}"
    );
    assert_eq!(
        fleet.ownership().get(&None).map(|s| s.len()),
        Some(5),
        "given back after"
    );
}
