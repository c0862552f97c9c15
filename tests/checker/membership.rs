//! Membership under faults: four processes share 150 units, one crashes half-way, a slow
//! reconciler drains; no unit may be worked on by two processes at once.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::membership::{Config, Leaser, NoHooks, Unit, Units};
use pgtenure::Db;

use crate::common::proxy::{database_addr, Proxy};
use crate::common::registry::{Registry, Worker};
use crate::common::{ledger, wait_for, Running, Tables};
use crate::harness::{inject_faults, proxied_url, run_for, Load};

#[test]
fn membership_under_random_faults_never_works_a_unit_twice() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&crate::common::db())
        .with_tables(&procs, &units_t)
        .unwrap();
    units.create_tables().unwrap();
    units
        .add(
            &(0..150)
                .map(|i| Unit::new("t", i).unwrap())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("members");
    let url = proxied_url(&proxy, &app);
    let registry = Arc::new(Registry::default());
    let mut config = Config::default();
    config.ttl = Duration::from_millis(900);
    config.heartbeat_interval = Duration::from_millis(200);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = Duration::from_secs(5);
    let leasers: Vec<Arc<Leaser>> = (0..4)
        .map(|i| {
            let db = Db::builder(&url)
                .unwrap()
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .build_lazy()
                .unwrap();
            Arc::new(
                Leaser::new(
                    &db,
                    Arc::new(Worker {
                        registry: registry.clone(),
                        id: i,
                        // Well inside the fifth of the TTL a loss has to reach the reconciler.
                        drain_ms: 60,
                    }),
                    config.clone(),
                    Arc::new(NoHooks),
                )
                .unwrap()
                .with_tables(&procs, &units_t)
                .unwrap(),
            )
        })
        .collect();
    for (i, leaser) in leasers.iter().enumerate() {
        registry.watch(i, leaser);
    }
    let mut running: Vec<Running> = leasers.iter().map(|l| Running::start(l.clone())).collect();
    let _load = Load::start(3);
    let duration = run_for();
    let until = Instant::now() + duration;
    // Crash one process half-way through: its units must move after its TTL.
    let crasher = {
        let registry = registry.clone();
        let mut crashing = running.pop().expect("four runners");
        thread::spawn(move || {
            thread::sleep(duration / 2);
            registry.crashed(3);
            crashing.stop();
        })
    };
    let samples = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (leasers, samples, done) = (leasers.clone(), samples.clone(), done.clone());
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                // Local views of live processes never overlap. The views are read one after the
                // other, twice: a unit is owned twice at once when a view held it in both of its
                // reads and another view held it in a read made between those two.
                let reads: Vec<BTreeSet<Unit>> = (0..2)
                    .flat_map(|_| leasers.iter().take(3))
                    .map(|l| l.owned().into_iter().collect())
                    .collect();
                for i in 0..3 {
                    let both = reads[i].intersection(&reads[i + 3]);
                    for unit in both {
                        if let Some(j) = (i + 1..i + 3).find(|j| reads[*j].contains(unit)) {
                            panic!("{unit} owned by {i} and {} at once", j % 3);
                        }
                    }
                }
                samples.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Every process writes for the units it owns, through the unit's fence: per unit, the ledger's
    // tokens never go down and each belongs to one process.
    let ledger_t = ledger::create(&mut tables);
    let fenced = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let writer = {
        let (leasers, done, fenced, ledger_t) = (
            leasers.clone(),
            done.clone(),
            fenced.clone(),
            ledger_t.clone(),
        );
        thread::spawn(move || {
            let db = crate::common::db();
            let insert = format!("INSERT INTO {ledger_t} (key, token, owner) VALUES ($1, $2, $3)");
            let mut round = 0;
            while !done.load(Ordering::SeqCst) {
                round += 1;
                for leaser in &leasers {
                    let owned = leaser.owned();
                    // A few units each round, a different few every round.
                    let from = round * 4 % owned.len().max(1);
                    for unit in owned.into_iter().cycle().skip(from).take(4) {
                        let Ok(mut conn) = db.connection() else {
                            continue;
                        };
                        let Ok(mut tx) = conn.transaction() else {
                            continue;
                        };
                        let token = leaser.token(&unit).unwrap_or(-1);
                        match leaser.fence(&mut tx, &unit) {
                            Ok(true) => {
                                let key = unit.to_string();
                                let owner = leaser.process_id();
                                if tx.execute(&insert, &[&key, &token, &owner]).is_ok()
                                    && tx.commit().is_ok()
                                {
                                    fenced.0.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                            Ok(false) => {
                                fenced.1.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(_) => {}
                        }
                    }
                }
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 3);
    crasher.join().unwrap();
    // Healed: the three survivors own every unit again.
    wait_for(
        "the survivors to own all 150 units",
        Duration::from_secs(15),
        || {
            (leasers
                .iter()
                .take(3)
                .map(|l| l.owned().len())
                .sum::<usize>()
                == 150)
                .then_some(())
        },
    );
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    writer.join().unwrap();
    let proof = ledger::assert_ordered(&ledger_t);
    for run in &mut running {
        run.stop();
    }
    let violations = registry.violations();
    println!(
        "membership checker, {duration:?}: {} ownership samples, {violations} double-worked units, {} fenced unit writes in {} tenures (in order), {} refused; faults: {faults:?}",
        samples.load(Ordering::SeqCst),
        proof.writes,
        proof.tenures,
        fenced.1.load(Ordering::SeqCst),
    );
    assert!(proof.writes > 0, "no fenced write went through");
    assert_eq!(violations, 0, "a unit was worked on by two processes");
}
