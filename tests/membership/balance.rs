//! Fair shares: how units are shared among live processes, by count and by weight, at every scale.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::client;
use pgtenure::membership::{Config, Leaser, Unit, UnitLoss};

use super::{assert_disjoint, config, round, Fleet, Recorder};

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

    // The claim statement's plans, prepared as the library prepares it: planned for these values
    // (the first five executions) and generic (every later one), with the planner's statistics as
    // the settled fleet leaves them, and then after many processes died (rows not yet swept: the
    // planner then expects many orphaned units, and must still look them up by index).
    let claim = pgtenure::testing::render_sql(
        &std::fs::read_to_string("sql/membership/claim.sql").unwrap(),
        &[
            ("units", fleet.units_table.as_str()),
            ("processes", fleet.processes.as_str()),
        ],
    )
    .unwrap();
    let mut explain = client();
    explain
        .batch_execute(&format!(
            "PREPARE claim (text, int4, int8, int4, int4, int8, bool) AS {claim}"
        ))
        .unwrap();
    let execute = format!(
        "EXPLAIN EXECUTE claim('{}', 64, 64, 12345, 12500, 12500, true)",
        all[0].process_id()
    );
    let claimable = format!("{}_claimable", fleet.units_table);
    let owner = format!("{}_owner", fleet.units_table);
    for dead in [0, 2000] {
        explain
            .batch_execute(&format!(
                "INSERT INTO {procs} (process_id, expires_at, hostname, version, started_at)
                     SELECT md5(g::text)::uuid, now() - interval '1 hour', 'gone', '0', now()
                       FROM generate_series(1, {dead}) g;
                 ANALYZE {procs}; ANALYZE {units}",
                procs = fleet.processes,
                units = fleet.units_table
            ))
            .unwrap();
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
            let plan = plan.join("\n");
            println!("{mode}, {dead} dead processes:\n{plan}");
            assert!(
                plan.contains(&claimable),
                "{mode}, {dead} dead: the claim does not use the claimable index:\n{plan}"
            );
            assert!(
                plan.contains(&owner),
                "{mode}, {dead} dead: the orphan lookup does not use the owner index:\n{plan}"
            );
            assert!(
                !plan.contains(&format!("Seq Scan on {}", fleet.units_table)),
                "{mode}, {dead} dead: the claim scans the units table:\n{plan}"
            );
        }
    }
}

/// A claim locks (and so writes) only the expired process rows that still own claimable units, not
/// every dead row waiting for the sweep.
#[test]
fn a_claim_does_not_lock_dead_processes_that_own_nothing() {
    let fleet = Fleet::new(10);
    let procs = &fleet.processes;
    client()
        .batch_execute(&format!(
            "INSERT INTO {procs} (process_id, expires_at, hostname, version, started_at)
                 SELECT md5(g::text)::uuid, now() - interval '1 minute', 'gone', '0', now()
                   FROM generate_series(1, 50) g"
        ))
        .unwrap();
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    let step = a.tick().unwrap();
    assert_eq!(step.claimed, 10, "the claim ran");
    let locked: i64 = client()
        .query_one(
            &format!("SELECT count(*) FROM {procs} WHERE expires_at < now() AND xmax <> '0'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(locked, 0, "dead rows that own nothing were locked");
}

/// Removing or disabling a unit of a process that died lowers what its row reports, so the others
/// stop counting that weight as claimable (they would claim in vain at every tick until the sweep).
#[test]
fn removing_or_disabling_an_expired_processs_units_lowers_what_its_row_reports() {
    let fleet = Fleet::new(3);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 3);
    let units: Vec<Unit> = a.owned();
    for unit in &units {
        assert!(fleet.units.set_weight(unit, 2).unwrap());
    }
    // The weights reach the row at once (the owner would report them at its next beat).
    client()
        .execute(
            &format!(
                "UPDATE {} SET expires_at = now() - interval '1 minute'",
                fleet.processes
            ),
            &[],
        )
        .unwrap();
    let reported = || -> (i32, i64) {
        let row = client()
            .query_one(
                &format!("SELECT unit_count, weight FROM {}", fleet.processes),
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(reported(), (3, 6));
    assert_eq!(fleet.units.remove(&units[..1]).unwrap(), 1);
    assert_eq!(reported(), (2, 4));
    // Registered again (weight 1), with the same owner: its weight counts again.
    assert_eq!(fleet.units.add(&units[..1]).unwrap(), 1);
    assert_eq!(reported(), (3, 5));
    assert!(fleet.units.set_weight(&units[1], 0).unwrap());
    assert_eq!(reported(), (3, 3));
    assert!(fleet.units.set_weight(&units[2], 5).unwrap());
    assert_eq!(reported(), (3, 6));
}

/// A unit disabled while its owner was below its share: the re-reading tick claims (it does not
/// shed), and the unit must still be given back once the owner settles at its share.
#[test]
fn a_unit_disabled_while_its_owner_claims_is_given_back_later() {
    let fleet = Fleet::new(10);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    for leaser in [&a, &b] {
        leaser.heartbeat().unwrap();
    }
    round(&[&a, &b]);
    assert_eq!((a.owned().len(), b.owned().len()), (5, 5));
    let disabled = a.owned()[0].clone();
    assert!(fleet.units.set_weight(&disabled, 0).unwrap());
    let new: Vec<Unit> = (0..4).map(|i| Unit::new("new", i).unwrap()).collect();
    fleet.units.add(&new).unwrap();
    let first = a.tick().unwrap();
    assert!(first.claimed > 0, "A was below its share: {first:?}");
    for _ in 0..4 {
        round(&[&a, &b]);
    }
    let owners = fleet.ownership();
    assert!(
        owners
            .get(&None)
            .is_some_and(|free| free.contains(&disabled)),
        "the disabled unit is still owned: {owners:?}"
    );
    assert_disjoint(&fleet, &[&a, &b]);
}

/// Units that changed owner between two snapshots of who owns what.
pub(super) fn moved(
    before: &BTreeMap<Option<String>, BTreeSet<Unit>>,
    after: &BTreeMap<Option<String>, BTreeSet<Unit>>,
) -> usize {
    let owner_of =
        |map: &BTreeMap<Option<String>, BTreeSet<Unit>>| -> BTreeMap<Unit, Option<String>> {
            map.iter()
                .flat_map(|(owner, units)| units.iter().map(move |u| (u.clone(), owner.clone())))
                .collect()
        };
    let (b, a) = (owner_of(before), owner_of(after));
    a.iter()
        .filter(|(u, owner)| b.get(*u) != Some(*owner))
        .count()
}

/// Whether every process holds floor or ceil of `total / n`.
pub(super) fn exact(counts: &[usize], total: usize) -> bool {
    let floor = total / counts.len();
    counts.iter().sum::<usize>() == total && counts.iter().all(|c| *c == floor || *c == floor + 1)
}

/// Runs rounds until two in a row write nothing (at most `most`); returns the rounds' counts.
fn converge(leasers: &[&Leaser], most: usize) -> Vec<Vec<usize>> {
    let mut rounds = Vec::new();
    for _ in 0..most {
        rounds.push(round(leasers));
    }
    rounds
}

/// Three rounds of `live` after a change (`what`): asserts exact balance at the end and returns how
/// many units changed owner, and who owns what then.
fn settle(
    fleet: &Fleet,
    live: &[&Leaser],
    total: usize,
    what: &str,
) -> (usize, BTreeMap<Option<String>, BTreeSet<Unit>>) {
    let before = fleet.ownership();
    let rounds = converge(live, 3);
    let after = fleet.ownership();
    println!("{what}, per round: {rounds:?}");
    assert!(exact(rounds.last().unwrap(), total), "{what}: {rounds:?}");
    assert_disjoint(fleet, live);
    (moved(&before, &after), after)
}

/// Exact balance, round by round, for totals that do not divide evenly, then no unit write.
#[test]
fn uneven_totals_settle_at_floor_or_ceil_round_by_round() {
    for (total, n) in [(1, 2), (3, 2), (7, 2), (20, 9), (35, 10), (1001, 8)] {
        let fleet = Fleet::new(total);
        let made: Vec<(Leaser, Arc<Recorder>)> = (0..n)
            .map(|_| fleet.leaser(config(Duration::from_secs(30))))
            .collect();
        let leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
        for leaser in &leasers {
            leaser.heartbeat().unwrap();
        }
        let rounds = converge(&leasers, 3);
        println!("{total}/{n}, per round: {rounds:?}");
        assert!(
            exact(rounds.last().unwrap(), total),
            "{total}/{n}: {rounds:?}"
        );
        let settled = fleet.ownership();
        round(&leasers);
        assert_eq!(
            moved(&settled, &fleet.ownership()),
            0,
            "{total}/{n} moved after settling"
        );
        assert_disjoint(&fleet, &leasers);
    }
}

/// After a join only units going to the newcomer move; after a graceful leave and after a crash,
/// only the departed process's units move. Each time as few as possible, and exact balance within
/// three rounds.
#[test]
fn a_join_a_leave_and_a_crash_move_only_the_units_that_must_move() {
    let total = 1000;
    let fleet = Fleet::new(total);
    // A TTL far longer than a round of ten processes on a loaded machine; the crash below makes
    // the row expire at once instead of waiting for it.
    let ttl = Duration::from_secs(30);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..10).map(|_| fleet.leaser(config(ttl))).collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut live: Vec<&Leaser> = all[..8].to_vec();
    for leaser in &live {
        leaser.heartbeat().unwrap();
    }
    converge(&live, 3);
    assert!(exact(&round(&live), total));

    // A ninth joins: it gets floor or ceil of 1000 / 9 (111 or 112), all from the others.
    live.push(all[8]);
    let (moved_units, after) = settle(&fleet, &live, total, "a ninth joins");
    let newcomer = after[&Some(all[8].process_id().to_owned())].len();
    assert_eq!(moved_units, newcomer, "only the newcomer's units moved");

    // One leaves gracefully: only its units move, to the others.
    let leaving = live.remove(3);
    let its = before_units(&fleet, leaving);
    leaving.release().unwrap();
    leaving.delete_process().unwrap();
    let (moved_units, _) = settle(&fleet, &live, total, "one leaves");
    assert_eq!(moved_units, its, "only the leaver's {its} units moved");

    // One crashes (stops heartbeating): after its TTL, only its units move.
    let crashed = live.remove(0);
    let its = before_units(&fleet, crashed);
    expire_keeping_alive(&fleet, &[crashed], &live);
    let (moved_units, _) = settle(&fleet, &live, total, "one crashes");
    assert_eq!(
        moved_units, its,
        "only the crashed process's {its} units moved"
    );
}

/// 310 units on 40 processes, 10 of which crash at once: the 30 survivors settle at 10 or 11 each
/// within three rounds, moving only the departed units.
#[test]
fn ten_of_forty_processes_crashing_at_once_move_only_their_units() {
    let total = 310;
    let fleet = Fleet::new(total);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..40)
        // A round of forty heartbeats and ticks took longer than four fifths of a 2 s TTL on a
        // loaded machine (processes lapsed mid-round and rounds never settled): 30 s, and the
        // crash below expires the rows at once.
        .map(|_| fleet.leaser(config(Duration::from_secs(30))))
        .collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    let rounds = converge(&all, 3);
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    let (crashed, live) = all.split_at(10);
    let departed: usize = crashed.iter().map(|l| before_units(&fleet, l)).sum();
    expire_keeping_alive(&fleet, crashed, live);
    let (moved_units, _) = settle(&fleet, live, total, "10 of 40 crash");
    assert_eq!(
        moved_units, departed,
        "only the {departed} departed units moved"
    );
}

/// Crashes the `crashed` processes after their TTL: they stop heartbeating and ticking, and their
/// rows are made to expire now (as waiting out the TTL would, without the wait); the `live` ones
/// heartbeat once more (as their loops would).
pub(super) fn expire_keeping_alive(fleet: &Fleet, crashed: &[&Leaser], live: &[&Leaser]) {
    let ids: Vec<&str> = crashed.iter().map(|l| l.process_id()).collect();
    client()
        .execute(
            &format!(
                "UPDATE {} SET expires_at = now() - interval '1 ms' WHERE process_id::text = ANY($1)",
                fleet.processes
            ),
            &[&ids],
        )
        .unwrap();
    for leaser in live {
        leaser.heartbeat().unwrap();
    }
}

/// How many units the database says `leaser` owns.
pub(super) fn before_units(fleet: &Fleet, leaser: &Leaser) -> usize {
    fleet
        .ownership()
        .get(&Some(leaser.process_id().to_owned()))
        .map_or(0, BTreeSet::len)
}

#[test]
fn a_fleet_started_within_one_heartbeat_interval_claims_each_unit_once_and_sheds_none() {
    // A deploy: eight processes start within one heartbeat interval of each other, 1,000 units.
    // Without the warm-up, the first to tick claimed every unit and shed seven eighths of them a
    // round later: the whole fleet's work started and stopped on one instance.
    let fleet = Fleet::new(1000);
    let mut config = Config::default();
    config.ttl = Duration::from_secs(3);
    config.heartbeat_interval = Duration::from_millis(400);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = Duration::from_secs(30);
    assert_eq!(
        config.warm_up, None,
        "the default: processes settle at their second heartbeat"
    );
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..8).map(|_| fleet.leaser(config.clone())).collect();
    let recorders: Vec<Arc<Recorder>> = made.iter().map(|(_, r)| r.clone()).collect();
    let mut running = Vec::new();
    for (leaser, _) in made {
        running.push(leaser.spawn().unwrap());
        // Within one heartbeat interval in all: 8 x 45 ms (real time is the subject: staggered
        // starts, as a deploy's).
        std::thread::sleep(Duration::from_millis(45));
    }
    let owned = |units: &str| -> Vec<i64> {
        let mut counts: Vec<i64> = client()
            .query(
                &format!(
                    "SELECT count(*) FROM {units} WHERE process_id IS NOT NULL GROUP BY process_id"
                ),
                &[],
            )
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        counts.sort_unstable();
        counts
    };
    let gained = |r: &Recorder| -> usize {
        r.events
            .lock()
            .iter()
            .filter(|(kind, _)| *kind == "gained")
            .map(|(_, units)| units.len())
            .sum()
    };
    // Settled in the database, and every process told of its share.
    let settled = crate::common::wait_for("a settled fleet", Duration::from_secs(30), || {
        let counts = owned(&fleet.units_table);
        let told = recorders.iter().all(|r| gained(r) - r.lost() == 125);
        (counts == vec![125; 8] && told).then_some(counts)
    });
    let gained: usize = recorders.iter().map(|r| gained(r)).sum();
    let lost: Vec<usize> = recorders.iter().map(|r| r.lost()).collect();
    for process in running {
        process.stop().unwrap();
    }
    println!("settled at {settled:?}: {gained} units gained, lost per process {lost:?}");
    assert_eq!(lost, vec![0; 8], "no unit was shed (or lost) on the way");
    assert_eq!(gained, 1000, "each unit claimed once");
}

#[test]
fn a_cold_fleet_that_keeps_changing_still_claims_after_a_bounded_warm_up() {
    // Review of issue 25: a crash-looping instance (a new process id at every start, each row live
    // for a TTL) or a slow scale-out changes the live set more often than once a warm-up. The
    // warm-up started again at every change, so no process ever claimed: every unit sat unowned
    // for as long as the changes went on. Kafka bounds its initial delay by the rebalance timeout.
    let fleet = Fleet::new(40);
    let mut steady = config(Duration::from_secs(1));
    steady.warm_up = Some(Duration::from_millis(300));
    let (leaser, _) = fleet.leaser(steady.clone());
    let started = Instant::now();
    let mut starts = 0;
    let owned = crate::common::wait_for("a claim", Duration::from_secs(8), || {
        // Another start of the crash-looping instance, under a new id: it heartbeats once.
        let (crashing, _) = fleet.leaser(steady.clone());
        crashing.heartbeat().unwrap();
        starts += 1;
        leaser.heartbeat().unwrap();
        let rebalance = leaser.tick().unwrap();
        // Real time is the subject: a new start of the crashing instance every 100 ms, more often
        // than a warm-up (300 ms), for the warm-up's bound to be tested.
        std::thread::sleep(Duration::from_millis(100));
        (rebalance.owned > 0).then_some(rebalance.owned)
    });
    // Due one warm-up and one TTL (1.3 s) after its first look.
    println!(
        "claimed {owned} after {:?} and {starts} starts of the crashing instance",
        started.elapsed()
    );
}

#[test]
fn a_process_joining_a_warm_fleet_claims_its_share_once_it_settles() {
    // A rolling deploy: the fleet's processes own every unit and shed the newcomer's share to it
    // once it has settled (its second heartbeat, by default); the newcomer takes them at its next
    // tick, not after a wall-clock wait (they would sit unowned meanwhile). With a warm-up duration
    // it settles only once it has been live that long: here an hour, so it never counts.
    let fleet = Fleet::new(40);
    let (warm, _) = fleet.leaser(config(Duration::from_secs(30)));
    warm.heartbeat().unwrap();
    warm.tick().unwrap();
    assert_eq!(warm.owned().len(), 40);
    let mut joining = config(Duration::from_secs(30));
    joining.warm_up = None;
    let (newcomer, _) = fleet.leaser(joining.clone());
    let leasers = [&warm, &newcomer];
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&leasers));
    }
    assert_eq!(rounds[2], vec![20, 20], "rounds: {rounds:?}");
    assert_disjoint(&fleet, &leasers);
    newcomer.release().unwrap();
    newcomer.delete_process().unwrap();
    assert_eq!(round(&[&warm]), vec![40]);
    joining.warm_up = Some(Duration::from_secs(3600));
    let (patient, _) = fleet.leaser(joining);
    let leasers = [&warm, &patient];
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&leasers));
    }
    assert_eq!(rounds, vec![vec![40, 0]; 3], "not live for its warm-up yet");
}

/// The default configuration with a TTL long enough that no process of a hand-driven test expires
/// between its rounds.
fn default_config() -> Config {
    let mut config = Config::default();
    config.ttl = Duration::from_secs(60);
    config.heartbeat_interval = Duration::from_secs(20);
    config.sweep_cutoff = Duration::from_secs(120);
    config
}

#[test]
fn a_hand_driven_fleet_converges_with_the_default_configuration() {
    // Rounds as a user's test drives them (heartbeat, then tick), as fast as the test calls them:
    // the probation and the cold start count heartbeats, not the wall clock. A cold start of four
    // claims nothing in the first round (nobody has settled), then each unit once.
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> =
        (0..4).map(|_| fleet.leaser(default_config())).collect();
    let leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&leasers));
        assert_disjoint(&fleet, &leasers);
    }
    println!("owned per round: {rounds:?}");
    assert_eq!(rounds[2], vec![25; 4], "rounds: {rounds:?}");
    let lost: usize = made.iter().map(|(_, r)| r.lost()).sum();
    assert_eq!(lost, 0, "no unit shed on the way: {rounds:?}");
}

#[test]
fn a_crash_looping_slot_is_never_shed_to_and_costs_the_fleet_at_most_its_own_share() {
    // A slot whose process dies and restarts under a new id (a bad deploy, an OOM loop): each
    // incarnation heartbeats once and ticks, then dies, its row live for a TTL. The healthy
    // processes must not count it in the fair share and shed to it: what they shed, dead
    // incarnations would hold until their rows expired.
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> =
        (0..4).map(|_| fleet.leaser(default_config())).collect();
    let healthy: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&healthy));
    }
    assert_eq!(rounds[2], vec![25; 4], "rounds: {rounds:?}");
    let mut claimed = 0;
    for _ in 0..8 {
        let (incarnation, _) = fleet.leaser(default_config());
        incarnation.heartbeat().unwrap();
        let rebalance = incarnation.tick().unwrap();
        assert!(rebalance.warming_up, "an unsettled incarnation waits");
        claimed += rebalance.claimed;
        // Dies: its row stays live for the TTL.
        drop(incarnation);
        assert_eq!(round(&healthy), vec![25; 4]);
    }
    let shed: usize = made.iter().map(|(_, r)| r.lost_for(UnitLoss::Shed)).sum();
    assert_eq!(
        shed, 0,
        "the healthy processes shed to incarnations that died"
    );
    assert_eq!(claimed, 0, "an incarnation that died claimed units");
    assert_disjoint(&fleet, &healthy);
    // An incarnation that stays (its second heartbeat settles it) gets its share.
    let (stays, _) = fleet.leaser(default_config());
    let mut all = healthy.clone();
    all.push(&stays);
    let mut rounds = Vec::new();
    for _ in 0..3 {
        rounds.push(round(&all));
    }
    assert_eq!(rounds[2], vec![20; 5], "rounds: {rounds:?}");
    assert_disjoint(&fleet, &all);
}
