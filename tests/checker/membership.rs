//! Membership under faults: four processes share 150 units, one crashes half-way, a slow
//! reconciler drains, and an operator now and then moves a unit from one live process to another
//! (keeping its token, or giving it a new one) or sets it unowned with a plain `UPDATE`; no unit may
//! be worked on by two processes at once, except that a unit the operator moved may be gained by its
//! new owner before its old owner's next tick, and the old owner's first tick that starts after the
//! change committed must stop its work on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::membership::{Config, Hooks, Leaser, Unit, Units};
use pgtenure::Db;

use crate::common::proxy::{database_addr, Proxy};
use crate::common::registry::{Registry, Worker};
use crate::common::{ledger, wait_for, Running, Tables};
use crate::harness::{inject_faults, mode, proxied_url, run_for, Load, Rng};

/// When a leaser's latest successful tick started, so the operator knows when a tick that started
/// after its change has come and gone (a leaser's ticks run one after the other, on its loop).
#[derive(Default)]
struct Ticks(Mutex<Option<Instant>>);

impl Ticks {
    /// Whether a tick that started at or after `instant` has completed.
    fn started_since(&self, instant: Instant) -> bool {
        self.0.lock().is_some_and(|started| started >= instant)
    }
}

impl Hooks for Ticks {
    fn rebalanced(&self, took: Duration) {
        // `took` runs from the tick's start to this call, so this is its start, or a few
        // nanoseconds after it: never before the tick read the database.
        *self.0.lock() = Some(Instant::now() - took);
    }
}

/// What the operator did, and what it found.
#[derive(Debug, Default)]
struct Operator {
    /// Units moved to another live process, keeping their token.
    moved: u64,
    /// Units moved to another live process with a new token.
    moved_new_token: u64,
    /// Units set unowned.
    freed: u64,
    /// Changes whose old owner completed a tick that started after the change committed (the check
    /// ran).
    checked: u64,
    /// Old owners that still worked on the unit under its old token after that tick.
    late: u64,
    /// The longest an operator's `UPDATE` took to commit (it may wait for a fenced write's lock).
    slowest: Duration,
    /// Tokens handed to a new owner: `(unit, token, new owner)`, for the ledger.
    handed: BTreeSet<(String, i64, String)>,
}

/// Until `until`, now and then changes a unit's owner behind the leasers' backs, as an operator's
/// plain `UPDATE` would, and checks that its old owner stopped working on it by the end of its first
/// tick that started after the change committed: every tick adopts the database's truth, and a tick
/// that started before the commit may have read the database before it. (Counting ticks from before
/// the `UPDATE` was sent is not enough: the `UPDATE` can take longer than two ticks, waiting for a
/// fenced write's row lock or for the CPU, and then its old owner's second tick read the database
/// before the change, too.)
fn operate(
    leasers: &[Arc<Leaser>],
    ticks: &[Arc<Ticks>],
    registry: &Registry,
    units_t: &str,
    until: Instant,
) -> Operator {
    let mut rng = Rng::new(11);
    let mut admin = crate::common::client();
    let mut op = Operator::default();
    let change = format!(
        "UPDATE {units_t} SET process_id = $3::text::uuid,
                token = CASE WHEN $4 THEN token + 1 ELSE token END
          WHERE tenant = $1 AND shard = $2 AND process_id = $5::text::uuid
         RETURNING token"
    );
    while Instant::now() < until {
        // Real time is the subject: a rogue write every 200-700 ms.
        thread::sleep(rng.millis(200, 700));
        let live: Vec<usize> = {
            let down = registry.down.lock();
            (0..leasers.len()).filter(|i| !down.contains(i)).collect()
        };
        if live.len() < 2 {
            continue;
        }
        let from = live[rng.below(live.len() as u64) as usize];
        let owned = leasers[from].owned();
        if owned.is_empty() {
            continue;
        }
        let unit = owned[rng.below(owned.len() as u64) as usize].clone();
        let Some(old_token) = leasers[from].token(&unit) else {
            continue;
        };
        let others: Vec<usize> = live.iter().copied().filter(|i| *i != from).collect();
        let to = others[rng.below(others.len() as u64) as usize];
        let (new_owner, new_token) = match rng.below(3) {
            0 => (None, false),
            1 => (Some(leasers[to].process_id().to_owned()), false),
            _ => (Some(leasers[to].process_id().to_owned()), true),
        };
        registry.in_transit.lock().insert(unit.clone(), from);
        let sent = Instant::now();
        let rows = admin.query(
            &change,
            &[
                &unit.tenant,
                &unit.shard,
                &new_owner,
                &new_token,
                &leasers[from].process_id(),
            ],
        );
        // The change committed before its answer came back: every tick started from now on reads it.
        let committed = Instant::now();
        let token: Option<i64> = match rows {
            Ok(rows) if !rows.is_empty() => rows[0].get(0),
            // The row no longer names `from` (its units moved meanwhile), or the admin
            // connection failed: nothing changed.
            _ => {
                registry.in_transit.lock().remove(&unit);
                if admin.is_closed() {
                    admin = crate::common::client();
                }
                continue;
            }
        };
        match (&new_owner, new_token) {
            (None, _) => op.freed += 1,
            (Some(_), true) => op.moved_new_token += 1,
            (Some(owner), false) => {
                op.moved += 1;
                if let Some(token) = token {
                    op.handed.insert((unit.to_string(), token, owner.clone()));
                }
            }
        }
        op.slowest = op.slowest.max(committed - sent);
        // Its first successful tick started after the commit, if it comes (faults may keep it
        // from ticking; it then expires, which stops its work as well).
        let ticked = (0..200).any(|_| {
            if ticks[from].started_since(committed) {
                return true;
            }
            // The poll interval of a bounded wait (5 s) on the process's next tick.
            thread::sleep(Duration::from_millis(25));
            false
        });
        if ticked {
            op.checked += 1;
            // Claimed back since (the unit was freed, or its new owner shed it): a new token.
            if leasers[from].token(&unit) == Some(old_token) {
                op.late += 1;
                eprintln!(
                    "{unit}: process {from} still works on it under token {old_token} after a tick that started after an operator moved it"
                );
            }
        }
        let mut in_transit = registry.in_transit.lock();
        if in_transit.get(&unit) == Some(&from) {
            in_transit.remove(&unit);
        }
    }
    op
}

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
    let ticks: Vec<Arc<Ticks>> = (0..4).map(|_| Arc::new(Ticks::default())).collect();
    let leasers: Vec<Arc<Leaser>> = (0..4)
        .map(|i| {
            let db = Db::builder(&url)
                .unwrap()
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .statement_mode(mode(i))
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
                )
                .map(|leaser| leaser.with_hooks(ticks[i].clone()))
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
            // Real time is the subject: the crash comes half-way through the run.
            thread::sleep(duration / 2);
            registry.crashed(3);
            crashing.stop();
        })
    };
    let samples = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (leasers, samples, done, registry) = (
            leasers.clone(),
            samples.clone(),
            done.clone(),
            registry.clone(),
        );
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                // Local views of live processes never overlap. The views are read one after the
                // other, twice: a unit is owned twice at once when a view held it in both of its
                // reads and another view held it in a read made between those two. A unit an
                // operator is moving (before and after the reads) is the operator's to check.
                let moving_before: BTreeMap<Unit, usize> = registry.in_transit.lock().clone();
                let reads: Vec<BTreeSet<Unit>> = (0..2)
                    .flat_map(|_| leasers.iter().take(3))
                    .map(|l| l.owned().into_iter().collect())
                    .collect();
                let moving_after: BTreeMap<Unit, usize> = registry.in_transit.lock().clone();
                for i in 0..3 {
                    let both = reads[i].intersection(&reads[i + 3]);
                    for unit in both {
                        if moving_before.contains_key(unit) || moving_after.contains_key(unit) {
                            continue;
                        }
                        if let Some(j) = (i + 1..i + 3).find(|j| reads[*j].contains(unit)) {
                            panic!("{unit} owned by {i} and {} at once", j % 3);
                        }
                    }
                }
                samples.fetch_add(1, Ordering::SeqCst);
                // Real time is the subject: the monitor samples ownership every 50 ms.
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
                // Real time is the subject: a worker's fenced writes every 20 ms.
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let operator = {
        let (leasers, ticks, registry, units_t) = (
            leasers.clone(),
            ticks.clone(),
            registry.clone(),
            units_t.clone(),
        );
        thread::spawn(move || operate(&leasers, &ticks, &registry, &units_t, until))
    };
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 3);
    crasher.join().unwrap();
    let op = operator.join().unwrap();
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
    let proof = ledger::assert_ordered_handing(&ledger_t, &op.handed);
    for run in &mut running {
        run.stop();
    }
    let violations = registry.violations();
    println!(
        "membership checker, {duration:?}: {} ownership samples, {violations} double-worked units, {} fenced unit writes in {} tenures (in order), {} refused; operator: {} moved keeping the token, {} moved with a new one, {} set unowned, {} checked at the old owner's first tick started after the change, {} still worked there (slowest change {:?}), {} gained before the old owner's tick, {} gains told after the gainer lost the unit again; faults: {faults:?}",
        samples.load(Ordering::SeqCst),
        proof.writes,
        proof.tenures,
        fenced.1.load(Ordering::SeqCst),
        op.moved,
        op.moved_new_token,
        op.freed,
        op.checked,
        op.late,
        op.slowest,
        registry.handed_over.load(Ordering::SeqCst),
        registry.stale_gains.load(Ordering::SeqCst),
    );
    assert!(proof.writes > 0, "no fenced write went through");
    assert_eq!(violations, 0, "a unit was worked on by two processes");
    assert!(op.checked > 0, "no operator change was checked");
    assert_eq!(
        op.late, 0,
        "an old owner kept working on a unit an operator moved past its first tick after the change"
    );
}
