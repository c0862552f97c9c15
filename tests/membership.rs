//! Membership against a real PostgreSQL: processes are `Leaser`s driven by hand (or by `run`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::proxy::{database_addr, Proxy};
use common::{client, db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::membership::{Config, Hooks, Leaser, Reconciler, Unit, Units};
use pgtenure::Db;

/// Records what the leaser reports, and says which units have work in flight.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(&'static str, Vec<Unit>)>>,
    busy: Mutex<BTreeSet<Unit>>,
}

impl Reconciler for Recorder {
    fn units_gained(&self, units: &[Unit]) {
        self.events.lock().push(("gained", units.to_vec()));
    }
    fn units_lost(&self, units: &[Unit]) {
        self.events.lock().push(("lost", units.to_vec()));
    }
    fn in_flight(&self, unit: &Unit) -> usize {
        usize::from(self.busy.lock().contains(unit))
    }
}

struct Fleet {
    db: Db,
    processes: String,
    units_table: String,
    units: Units,
    _tables: Tables,
}

impl Fleet {
    fn new(units: usize) -> Fleet {
        Fleet::on(db(), units)
    }

    fn on(db: Db, count: usize) -> Fleet {
        let mut tables = Tables::new();
        let processes = tables.name("procs");
        let units_table = tables.name("units");
        let units = Units::new(&db)
            .with_tables(&processes, &units_table)
            .unwrap();
        units.create_tables().unwrap();
        let all: Vec<Unit> = (0..count)
            .map(|i| Unit::new(&format!("tenant-{}", i % 10), i as i32).unwrap())
            .collect();
        for chunk in all.chunks(50_000) {
            assert_eq!(units.add(chunk).unwrap(), chunk.len() as u64);
        }
        Fleet {
            db,
            processes,
            units_table,
            units,
            _tables: tables,
        }
    }

    fn leaser(&self, config: Config) -> (Leaser, Arc<Recorder>) {
        let recorder = Arc::new(Recorder::default());
        let leaser = Leaser::new(&self.db, recorder.clone(), config, Hooks::default())
            .unwrap()
            .with_tables(&self.processes, &self.units_table)
            .unwrap();
        (leaser, recorder)
    }

    /// Who owns what, by the database: process id -> units.
    fn ownership(&self) -> BTreeMap<Option<String>, BTreeSet<Unit>> {
        let mut map: BTreeMap<Option<String>, BTreeSet<Unit>> = BTreeMap::new();
        let rows = client()
            .query(
                &format!(
                    "SELECT process_id::text, tenant, shard FROM {}",
                    self.units_table
                ),
                &[],
            )
            .unwrap();
        for row in rows {
            map.entry(row.get(0)).or_default().insert(Unit {
                tenant: row.get(1),
                shard: row.get(2),
            });
        }
        map
    }
}

fn config(ttl: Duration) -> Config {
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = ttl / 3;
    config.sweep_cutoff = ttl * 2;
    config
}

/// One round: each leaser heartbeats and ticks, in order; returns each one's owned count.
fn round(leasers: &[&Leaser]) -> Vec<usize> {
    for leaser in leasers {
        leaser.heartbeat().unwrap();
        leaser.tick().unwrap();
    }
    leasers.iter().map(|l| l.owned().len()).collect()
}

/// The leasers' local views are disjoint and each matches the database.
fn assert_disjoint(fleet: &Fleet, leasers: &[&Leaser]) {
    let truth = fleet.ownership();
    let mut seen = BTreeSet::new();
    for leaser in leasers {
        let owned: BTreeSet<Unit> = leaser.owned().into_iter().collect();
        for unit in &owned {
            assert!(
                seen.insert(unit.clone()),
                "{unit} is owned by two processes"
            );
        }
        let db_view = truth
            .get(&Some(leaser.process_id().to_owned()))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            owned,
            db_view,
            "local view of {} differs from the database",
            leaser.process_id()
        );
    }
}

#[test]
fn four_leasers_share_100_units_fairly_within_three_rounds() {
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4)
        .map(|_| fleet.leaser(config(Duration::from_secs(30))))
        .collect();
    let leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &leasers {
        leaser.heartbeat().unwrap();
        assert!(!leaser.ready());
    }
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&leasers));
        assert_disjoint(&fleet, &leasers);
    }
    println!("owned per round: {rounds:?}");
    assert_eq!(
        rounds[0],
        vec![25, 25, 25, 25],
        "fair after the first round"
    );
    assert_eq!(rounds[2], vec![25, 25, 25, 25]);
    assert!(leasers.iter().all(|l| l.ready()));
    // Gains were reported once, and nothing was lost.
    for (leaser, recorder) in &made {
        let events = recorder.events.lock();
        let gained: usize = events
            .iter()
            .filter(|(k, _)| *k == "gained")
            .map(|(_, u)| u.len())
            .sum();
        assert_eq!(gained, 25);
        assert!(
            events.iter().all(|(k, _)| *k == "gained"),
            "{}: {events:?}",
            leaser.process_id()
        );
    }
    // A steady fleet writes nothing to the units table: holding units costs no writes. Every row
    // version's xmin names the transaction that wrote it, so an unchanged set proves no write.
    let versions = || -> Vec<(String, i32, String)> {
        client()
            .query(
                &format!(
                    "SELECT tenant, shard, xmin::text FROM {} ORDER BY 1, 2",
                    fleet.units_table
                ),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    };
    let before = versions();
    for _ in 0..2 {
        for leaser in &leasers {
            leaser.heartbeat().unwrap();
            let report = leaser.tick().unwrap();
            assert_eq!((report.claimed, report.shed), (0, 0));
        }
    }
    assert_eq!(versions(), before, "steady rounds wrote to the units table");
}

#[test]
fn a_joining_leaser_gets_its_share_and_busy_units_are_never_shed() {
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..5)
        .map(|_| fleet.leaser(config(Duration::from_secs(30))))
        .collect();
    let first: Vec<&Leaser> = made[..4].iter().map(|(l, _)| l).collect();
    for leaser in &first {
        leaser.heartbeat().unwrap();
    }
    round(&first);
    // Ten units of each of the first four have work in flight.
    let mut busy: BTreeMap<String, BTreeSet<Unit>> = BTreeMap::new();
    for (leaser, recorder) in &made[..4] {
        let units: BTreeSet<Unit> = leaser.owned().into_iter().take(10).collect();
        recorder.busy.lock().extend(units.iter().cloned());
        busy.insert(leaser.process_id().to_owned(), units);
    }
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    made[4].0.heartbeat().unwrap();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&all));
        assert_disjoint(&fleet, &all);
    }
    println!("owned per round after the join: {rounds:?}");
    let last = rounds.last().unwrap();
    assert!(
        last.iter().all(|n| *n <= 24),
        "fair share 20, at most 20 x 1.2: {last:?}"
    );
    assert!(last[4] >= 16, "the newcomer got its share: {last:?}");
    assert_eq!(last.iter().sum::<usize>(), 100);
    let truth = fleet.ownership();
    for (process, units) in busy {
        let owned = &truth[&Some(process)];
        assert!(
            units.is_subset(owned),
            "a unit with work in flight was shed"
        );
    }
    // The sheds were reported as losses, before any gain in the same tick.
    for (_, recorder) in &made[..4] {
        let events = recorder.events.lock();
        assert!(events.iter().any(|(k, _)| *k == "lost"));
    }
}

#[test]
fn a_crashed_leasers_units_are_claimed_after_its_ttl_and_its_stale_tick_does_nothing() {
    let fleet = Fleet::new(100);
    let ttl = Duration::from_millis(600);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4).map(|_| fleet.leaser(config(ttl))).collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    round(&all);
    let crashed = all[3];
    let crashed_units: BTreeSet<Unit> = crashed.owned().into_iter().collect();
    let expires_at: std::time::SystemTime = client()
        .query_one(
            &format!(
                "SELECT expires_at FROM {} WHERE process_id = $1::text::uuid",
                fleet.processes
            ),
            &[&crashed.process_id()],
        )
        .unwrap()
        .get(0);
    let survivors = &all[..3];
    let counts = wait_for(
        "the survivors to take the crashed units",
        Duration::from_secs(10),
        || {
            let counts = round(survivors);
            (counts.iter().sum::<usize>() == 100).then_some(counts)
        },
    );
    println!("survivors own {counts:?}");
    assert!(
        counts.iter().all(|n| (32..=34).contains(n)),
        "fair share 34: {counts:?}"
    );
    let taken_at: std::time::SystemTime = client()
        .query_one(
            &format!(
                "SELECT min(claimed_at) FROM {} WHERE (tenant, shard) IN (SELECT * FROM unnest($1::text[], $2::int[]))",
                fleet.units_table
            ),
            &[
                &crashed_units.iter().map(|u| u.tenant.clone()).collect::<Vec<_>>(),
                &crashed_units.iter().map(|u| u.shard).collect::<Vec<_>>(),
            ],
        )
        .unwrap()
        .get(0);
    assert!(
        taken_at >= expires_at,
        "claimed at {taken_at:?} before the TTL ended at {expires_at:?}"
    );
    assert_disjoint(&fleet, survivors);

    // The crashed process wakes up and ticks without a heartbeat: it learns its losses, and claims
    // and sheds nothing, even with unowned units about.
    fleet
        .units
        .add(&[Unit::new("late", 1).unwrap(), Unit::new("late", 2).unwrap()])
        .unwrap();
    let stale = crashed.tick().unwrap();
    assert!(!stale.live);
    assert_eq!((stale.claimed, stale.shed, stale.owned), (0, 0, 0));
    assert_eq!(
        stale.lost.into_iter().collect::<BTreeSet<_>>(),
        crashed_units
    );
    assert!(fleet.ownership()[&None].contains(&Unit::new("late", 1).unwrap()));
}

#[test]
fn a_graceful_leave_hands_units_over_at_the_next_round_without_waiting_for_a_ttl() {
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4)
        .map(|_| fleet.leaser(config(Duration::from_secs(60))))
        .collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    round(&all);
    let leaving = all[3];
    let released = leaving.release().unwrap();
    assert_eq!(released.len(), 25);
    assert!(leaving.owned().is_empty());
    leaving.delete_process().unwrap();
    let started = Instant::now();
    let counts = round(&all[..3]);
    assert_eq!(counts.iter().sum::<usize>(), 100, "{counts:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(
        counts.iter().all(|n| (32..=34).contains(n)),
        "fair share 34: {counts:?}"
    );
    let rows: i64 = common::count(&mut client(), &fleet.processes);
    assert_eq!(rows, 3, "the process row is gone");
}

#[test]
fn sweep_deletes_long_dead_processes_and_frees_their_units() {
    let fleet = Fleet::new(40);
    let ttl = Duration::from_millis(300);
    let (dead, _) = fleet.leaser(config(ttl));
    let (alive, _) = fleet.leaser(config(ttl));
    dead.heartbeat().unwrap();
    dead.tick().unwrap();
    assert_eq!(dead.owned().len(), 40, "alone, it owns everything");
    let swept = wait_for(
        "the dead row to pass the sweep cutoff",
        Duration::from_secs(10),
        || {
            alive.heartbeat().unwrap();
            let sweep = alive.sweep().unwrap();
            (sweep.processes > 0).then_some(sweep)
        },
    );
    assert_eq!((swept.processes, swept.units), (1, 40));
    let truth = fleet.ownership();
    assert_eq!(truth[&None].len(), 40, "freed");
    assert!(!truth.contains_key(&Some(dead.process_id().to_owned())));
    assert_eq!(
        alive.sweep().unwrap().processes,
        0,
        "the live process is never swept"
    );
}

#[test]
fn weighted_units_are_shared_by_weight_and_weight_zero_units_stay_unowned() {
    let fleet = Fleet::new(0);
    let heavy: Vec<Unit> = (0..10).map(|i| Unit::new("heavy", i).unwrap()).collect();
    let light: Vec<Unit> = (0..50).map(|i| Unit::new("light", i).unwrap()).collect();
    let off: Vec<Unit> = (0..5).map(|i| Unit::new("off", i).unwrap()).collect();
    fleet.units.add(&heavy).unwrap();
    fleet.units.add(&light).unwrap();
    fleet.units.add(&off).unwrap();
    for unit in &heavy {
        assert!(fleet.units.set_weight(unit, 5).unwrap());
    }
    for unit in &off {
        assert!(fleet.units.set_weight(unit, 0).unwrap());
    }
    assert!(!fleet
        .units
        .set_weight(&Unit::new("nobody", 0).unwrap(), 3)
        .unwrap());
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    b.heartbeat().unwrap();
    let mut weights = Vec::new();
    for _ in 0..3 {
        let ra = a.tick().unwrap();
        let rb = b.tick().unwrap();
        weights.push((ra.owned_weight, rb.owned_weight));
    }
    println!("owned weight per round: {weights:?}");
    let (wa, wb) = *weights.last().unwrap();
    assert_eq!(wa + wb, 100);
    assert!(
        (40..=60).contains(&wa) && (40..=60).contains(&wb),
        "{weights:?}"
    );
    let truth = fleet.ownership();
    assert!(
        off.iter().all(|u| truth[&None].contains(u)),
        "weight-0 units are never claimed"
    );

    // A unit removed while owned is reported lost at its owner's next tick.
    let removed = b.owned().into_iter().next().unwrap();
    assert_eq!(
        fleet.units.remove(std::slice::from_ref(&removed)).unwrap(),
        1
    );
    let report = b.tick().unwrap();
    assert_eq!(report.lost, vec![removed.clone()]);
    assert!(!b.owned().contains(&removed));

    // A unit disabled while owned is given back at its owner's next tick.
    let owned_light = a.owned().into_iter().find(|u| u.tenant == "light").unwrap();
    fleet.units.set_weight(&owned_light, 0).unwrap();
    let report = a.tick().unwrap();
    assert!(report.lost.contains(&owned_light));
    assert!(fleet.ownership()[&None].contains(&owned_light));
}

#[test]
fn hooks_see_claims_sheds_ticks_and_ownership() {
    let fleet = Fleet::new(30);
    let claimed = Arc::new(AtomicUsize::new(0));
    let ticks = Arc::new(AtomicUsize::new(0));
    let owned = Arc::new(AtomicUsize::new(0));
    let (c, t, o) = (claimed.clone(), ticks.clone(), owned.clone());
    let hooks = Hooks {
        claimed: Some(Box::new(move |n| {
            c.fetch_add(n, Ordering::SeqCst);
        })),
        rebalanced: Some(Box::new(move |_| {
            t.fetch_add(1, Ordering::SeqCst);
        })),
        owned: Some(Box::new(move |n, _| o.store(n, Ordering::SeqCst))),
        ..Hooks::default()
    };
    let leaser = Leaser::new(
        &fleet.db,
        Arc::new(Recorder::default()),
        config(Duration::from_secs(30)),
        hooks,
    )
    .unwrap()
    .with_tables(&fleet.processes, &fleet.units_table)
    .unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    leaser.tick().unwrap();
    assert_eq!(claimed.load(Ordering::SeqCst), 30);
    assert_eq!(ticks.load(Ordering::SeqCst), 2);
    assert_eq!(owned.load(Ordering::SeqCst), 30);
}

#[test]
fn run_starts_while_the_database_is_unreachable_and_stops_promptly() {
    let fleet = Fleet::new(10);
    let port = Proxy::free_port();
    let via = common::config_at("127.0.0.1", port);
    let lazy = pgtenure::DbBuilder::from_config(via)
        .connection_timeout(Duration::from_millis(300))
        .unwrap()
        .build_lazy();
    let mut cfg = config(Duration::from_secs(3));
    cfg.rebalance_interval = Duration::from_millis(100);
    let leaser = Arc::new(
        Leaser::new(&lazy, Arc::new(Recorder::default()), cfg, Hooks::default())
            .unwrap()
            .with_tables(&fleet.processes, &fleet.units_table)
            .unwrap(),
    );
    let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let runner = {
        let leaser = leaser.clone();
        thread::spawn(move || leaser.run(&shutdown))
    };
    thread::sleep(Duration::from_millis(1500));
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
fn one_hundred_thousand_units_and_eight_leasers_converge_and_claims_use_the_indexes() {
    let fleet = Fleet::new(100_000);
    client()
        .batch_execute(&format!(
            "ANALYZE {}; ANALYZE {}",
            fleet.units_table, fleet.processes
        ))
        .unwrap();
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..8)
        .map(|_| fleet.leaser(config(Duration::from_secs(120))))
        .collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    let started = Instant::now();
    let mut rounds = 0;
    let counts = loop {
        rounds += 1;
        let counts = round(&all);
        if counts.iter().all(|n| *n == 12_500) || rounds == 40 {
            break counts;
        }
    };
    println!(
        "100,000 units, 8 leasers: {counts:?} after {rounds} rounds in {:?}",
        started.elapsed()
    );
    assert!(
        counts.iter().all(|n| *n == 12_500),
        "not converged after {rounds} rounds: {counts:?}"
    );
    assert_disjoint(&fleet, &all);

    client()
        .batch_execute(&format!("ANALYZE {}", fleet.units_table))
        .unwrap();
    // The claim statement's plans, prepared as the library prepares it: planned for these values
    // (the first five executions) and generic (every later one).
    let claim = std::fs::read_to_string("sql/membership/claim.sql")
        .unwrap()
        .replace("{units}", &format!("\"{}\"", fleet.units_table))
        .replace("{processes}", &format!("\"{}\"", fleet.processes));
    let mut explain = client();
    explain
        .batch_execute(&format!(
            "PREPARE claim (text, int4, int8, int4, int4, int8) AS {claim}"
        ))
        .unwrap();
    let execute = format!(
        "EXPLAIN EXECUTE claim('{}', 64, 64, 12345, 12500, 12500)",
        all[0].process_id()
    );
    let mut plans = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        explain
            .batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .unwrap();
        let plan: Vec<String> = explain
            .query(&execute, &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        plans.push((mode, plan.join("\n")));
    }
    let claimable = format!("{}_claimable", fleet.units_table);
    let owner = format!("{}_owner", fleet.units_table);
    for (mode, plan) in &plans {
        println!("{mode}:\n{plan}");
        assert!(
            plan.contains(&claimable),
            "{mode}: the claim does not use the claimable index:\n{plan}"
        );
        assert!(
            plan.contains(&owner),
            "{mode}: the orphan lookup does not use the owner index:\n{plan}"
        );
        assert!(
            !plan.contains(&format!("Seq Scan on {}", fleet.units_table)),
            "{mode}: the claim scans the units table:\n{plan}"
        );
    }
}

#[test]
fn past_its_local_deadline_a_leaser_owns_nothing_and_a_late_heartbeat_reports_the_loss() {
    let fleet = Fleet::new(10);
    let ttl = Duration::from_millis(400);
    let (leaser, recorder) = fleet.leaser(config(ttl));
    assert_eq!(leaser.live_until(), None);
    leaser.heartbeat().unwrap();
    let until = leaser.live_until().expect("live after a heartbeat");
    assert_eq!(leaser.tick().unwrap().owned, 10);
    assert_eq!(leaser.owned().len(), 10);
    wait_for("the local deadline to pass", Duration::from_secs(5), || {
        (Instant::now() >= until).then_some(())
    });
    assert!(
        leaser.owned().is_empty(),
        "past its deadline another process may own them"
    );
    // The database also let the row expire: the late heartbeat says so, and the units are lost.
    wait_for("the row to expire", Duration::from_secs(5), || {
        let expired: bool = client()
            .query_one(
                &format!(
                    "SELECT bool_and(expires_at <= now()) FROM {}",
                    fleet.processes
                ),
                &[],
            )
            .unwrap()
            .get(0);
        expired.then_some(())
    });
    leaser.heartbeat().unwrap();
    let lost: usize = recorder
        .events
        .lock()
        .iter()
        .filter(|(kind, _)| *kind == "lost")
        .map(|(_, units)| units.len())
        .sum();
    assert_eq!(lost, 10, "the late heartbeat reported every unit lost");
    assert!(leaser.owned().is_empty());
    // Nobody took them meanwhile, so the next tick finds them still this process's.
    let report = leaser.tick().unwrap();
    assert_eq!((report.gained.len(), report.claimed), (10, 0));
    assert_eq!(leaser.owned().len(), 10);
}

#[test]
fn a_ninth_leaser_joining_eight_gets_its_share_although_nobody_is_above_the_hysteresis() {
    // 200 units, eight at 25; a ninth makes the fair share 23, and 25 is below 23 x 1.2.
    let fleet = Fleet::new(200);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..9)
        .map(|_| fleet.leaser(config(Duration::from_secs(30))))
        .collect();
    let eight: Vec<&Leaser> = made[..8].iter().map(|(l, _)| l).collect();
    for leaser in &eight {
        leaser.heartbeat().unwrap();
    }
    assert_eq!(round(&eight), vec![25; 8]);
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    made[8].0.heartbeat().unwrap();
    let rounds: Vec<Vec<usize>> = (0..3).map(|_| round(&all)).collect();
    println!("eight plus a ninth, per round: {rounds:?}");
    let last = rounds.last().unwrap();
    assert!(last[8] >= 19, "the newcomer starves: {last:?}");
    assert!(last.iter().all(|n| *n <= 27), "{last:?}");
    assert_eq!(rounds[1], rounds[2], "stable after the first round");
    assert_disjoint(&fleet, &all);
}

#[test]
fn every_small_share_settles_at_floor_or_ceil_within_three_rounds_then_writes_nothing() {
    for (total, n) in [
        (1, 2),
        (3, 2),
        (3, 4),
        (4, 3),
        (7, 2),
        (15, 4),
        (20, 9),
        (35, 10),
    ] {
        let fleet = Fleet::new(total);
        let made: Vec<(Leaser, Arc<Recorder>)> = (0..n)
            .map(|_| fleet.leaser(config(Duration::from_secs(30))))
            .collect();
        let leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
        for leaser in &leasers {
            leaser.heartbeat().unwrap();
        }
        let rounds: Vec<Vec<usize>> = (0..3).map(|_| round(&leasers)).collect();
        let last = rounds.last().unwrap();
        let floor = total / n;
        assert_eq!(last.iter().sum::<usize>(), total, "{total}/{n}: {rounds:?}");
        assert!(
            last.iter().all(|c| *c == floor || *c == floor + 1),
            "{total}/{n} after three rounds: {rounds:?}"
        );
        assert_disjoint(&fleet, &leasers);
        // Settled: no unit row is written any more.
        for _ in 0..3 {
            for leaser in &leasers {
                leaser.heartbeat().unwrap();
                let step = leaser.tick().unwrap();
                assert_eq!(
                    (step.claimed, step.shed),
                    (0, 0),
                    "{total}/{n} moved after settling at {last:?}"
                );
            }
        }
    }
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
    let err = pgtenure::Leases::new(&db())
        .with_table(&leases_t)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert!(err.to_string().contains("token_seq"), "{err}");
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
        common::registry::working(self.told.lock().iter())
    }
}

impl Reconciler for SlowDrain {
    fn units_gained(&self, units: &[Unit]) {
        self.told.lock().push((true, units.to_vec()));
    }
    fn units_lost(&self, units: &[Unit]) {
        self.told.lock().push((false, units.to_vec()));
        let slow = self.slow.lock().take();
        if let Some((wait, hook)) = slow {
            hook();
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
    let ticks = Arc::new(AtomicUsize::new(0));
    let hooks = Hooks {
        rebalanced: Some(Box::new({
            let ticks = ticks.clone();
            move |_| {
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        })),
        ..Hooks::default()
    };
    let leaser = Arc::new(
        Leaser::new(&slow_db, drain.clone(), fast, hooks)
            .unwrap()
            .with_tables(&fleet.processes, &fleet.units_table)
            .unwrap(),
    );
    let mut running = common::Running::start(leaser.clone());
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
    let seen = ticks.load(Ordering::SeqCst);
    wait_for("two more ticks", Duration::from_secs(10), || {
        (ticks.load(Ordering::SeqCst) >= seen + 2).then_some(())
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
    fn units_lost(&self, units: &[Unit]) {
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
            Hooks::default(),
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
