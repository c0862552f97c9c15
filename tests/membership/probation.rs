//! The probation with the default configuration (a process counts, claims and is shed to from its
//! second heartbeat), driven by hand in the orders a user's test may choose: joins, leaves,
//! crashes, a rolling deploy, a whole fleet restarting, a restart under the same process id.
//! DESIGN.md ("Membership, continued"): balance within 3 rounds of a join, leave or crash, only
//! the units that must move move, a cold start claims each unit once and sheds none.

use std::sync::Arc;
use std::time::Duration;

use crate::common::client;
use pgtenure::membership::{Config, Leaser};

use super::balance::{before_units, exact, expire_keeping_alive, moved};
use super::{assert_disjoint, round, Fleet, Recorder};

/// The default configuration (probation on) with a TTL no hand-driven round outlasts.
fn probation() -> Config {
    let mut config = Config::default();
    config.ttl = Duration::from_secs(60);
    config.heartbeat_interval = Duration::from_secs(20);
    config.sweep_cutoff = Duration::from_secs(120);
    assert_eq!(config.warm_up, None);
    config
}

/// Rounds of `live` until exact balance, at most `most`; returns them.
fn rounds_until_exact(live: &[&Leaser], total: usize, most: usize) -> Vec<Vec<usize>> {
    let mut rounds = Vec::new();
    for _ in 0..most {
        let counts = round(live);
        let done = exact(&counts, total);
        rounds.push(counts);
        if done {
            break;
        }
    }
    rounds
}

#[test]
fn with_the_default_configuration_a_join_a_leave_and_a_crash_move_only_the_units_that_must_move() {
    let total = 1000;
    let fleet = Fleet::new(total);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..10).map(|_| fleet.leaser(probation())).collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut live: Vec<&Leaser> = all[..8].to_vec();
    let rounds = rounds_until_exact(&live, total, 3);
    assert!(
        exact(rounds.last().unwrap(), total),
        "cold start: {rounds:?}"
    );

    // A ninth joins (first in the round, then last): only units going to it move, within 3 rounds.
    for (newcomer, first) in [(all[8], true), (all[9], false)] {
        if first {
            live.insert(0, newcomer);
        } else {
            live.push(newcomer);
        }
        let before = fleet.ownership();
        let rounds = rounds_until_exact(&live, total, 3);
        let after = fleet.ownership();
        println!("a join (first in the round: {first}): {rounds:?}");
        assert!(exact(rounds.last().unwrap(), total), "join: {rounds:?}");
        let its = after[&Some(newcomer.process_id().to_owned())].len();
        assert_eq!(
            moved(&before, &after),
            its,
            "only the newcomer's units moved"
        );
        assert_disjoint(&fleet, &live);
    }

    // One leaves gracefully: only its units move.
    let leaving = live.remove(3);
    let its = before_units(&fleet, leaving);
    leaving.release().unwrap();
    leaving.delete_process().unwrap();
    let before = fleet.ownership();
    let rounds = rounds_until_exact(&live, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "leave: {rounds:?}");
    assert_eq!(moved(&before, &fleet.ownership()), its);

    // One crashes: after its TTL only its units move.
    let crashed = live.remove(0);
    let its = before_units(&fleet, crashed);
    expire_keeping_alive(&fleet, &[crashed], &live);
    let before = fleet.ownership();
    let rounds = rounds_until_exact(&live, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "crash: {rounds:?}");
    assert_eq!(moved(&before, &fleet.ownership()), its);
    let shed: usize = made.iter().map(|(_, r)| r.lost()).sum();
    println!("units told lost on the way (leave and join sheds): {shed}");
}

#[test]
fn all_heartbeats_then_all_ticks_converge_with_the_default_configuration() {
    // Another order a user's test may drive: every process heartbeats, then every process ticks.
    let total = 100;
    let fleet = Fleet::new(total);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4).map(|_| fleet.leaser(probation())).collect();
    let leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        for leaser in &leasers {
            leaser.heartbeat().unwrap();
        }
        for leaser in &leasers {
            leaser.tick().unwrap();
        }
        rounds.push(leasers.iter().map(|l| l.owned().len()).collect::<Vec<_>>());
        assert_disjoint(&fleet, &leasers);
    }
    println!("all heartbeats, then all ticks: {rounds:?}");
    assert_eq!(rounds[2], vec![25; 4], "rounds: {rounds:?}");
    let lost: usize = made.iter().map(|(_, r)| r.lost()).sum();
    assert_eq!(lost, 0, "a cold start sheds none: {rounds:?}");
}

#[test]
fn a_whole_fleet_restarting_under_new_ids_claims_each_unit_once_and_sheds_none() {
    // Warm to cold: every process dies at once (a deploy that replaces all, a node pool lost) and
    // new processes start. The old rows own every unit until they expire; the new fleet must take
    // each unit once, within 3 rounds of the old rows expiring, and shed none.
    let total = 400;
    let fleet = Fleet::new(total);
    let old: Vec<(Leaser, Arc<Recorder>)> = (0..4).map(|_| fleet.leaser(probation())).collect();
    let old_refs: Vec<&Leaser> = old.iter().map(|(l, _)| l).collect();
    let rounds = rounds_until_exact(&old_refs, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    let new: Vec<(Leaser, Arc<Recorder>)> = (0..4).map(|_| fleet.leaser(probation())).collect();
    let new_refs: Vec<&Leaser> = new.iter().map(|(l, _)| l).collect();
    // Two rounds while the old rows still live: they settle, and claim nothing of a live owner.
    let early: Vec<Vec<usize>> = (0..2).map(|_| round(&new_refs)).collect();
    assert_eq!(early[1], vec![0; 4], "nothing is free yet: {early:?}");
    expire_keeping_alive(&fleet, &old_refs, &new_refs);
    let before = fleet.ownership();
    let rounds = rounds_until_exact(&new_refs, total, 3);
    println!("a whole fleet restarted: {early:?} then {rounds:?}");
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    assert_eq!(moved(&before, &fleet.ownership()), total, "each unit once");
    let lost: usize = new.iter().map(|(_, r)| r.lost()).sum();
    assert_eq!(lost, 0, "the new fleet shed units: {rounds:?}");
    assert_disjoint(&fleet, &new_refs);
}

#[test]
fn a_rolling_deploy_replacing_one_process_at_a_time_keeps_every_unit_owned_between_rounds() {
    // One process at a time stops (release, delete its row) and a new one starts in its place.
    // Measured: units that change owner per replacement (the departed one's share is the least),
    // and units left without an owner at the end of each round.
    let total = 800;
    let fleet = Fleet::new(total);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..16).map(|_| fleet.leaser(probation())).collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let mut live: Vec<&Leaser> = all[..8].to_vec();
    let rounds = rounds_until_exact(&live, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    let unowned = || {
        client()
            .query_one(
                &format!(
                    "SELECT count(*) FROM {} WHERE process_id IS NULL",
                    fleet.units_table
                ),
                &[],
            )
            .unwrap()
            .get::<_, i64>(0)
    };
    let mut figures = Vec::new();
    for step in 0..8 {
        let leaving = live.remove(0);
        leaving.release().unwrap();
        leaving.delete_process().unwrap();
        live.push(all[8 + step]);
        let before = fleet.ownership();
        let mut per_round = Vec::new();
        let mut free = Vec::new();
        for _ in 0..4 {
            per_round.push(round(&live));
            free.push(unowned());
        }
        assert!(exact(per_round.last().unwrap(), total), "{per_round:?}");
        assert_disjoint(&fleet, &live);
        figures.push((moved(&before, &fleet.ownership()), free));
    }
    println!(
        "rolling deploy, per replacement (units moved, unowned after each round): {figures:?}"
    );
    for (moves, free) in &figures {
        assert_eq!(free[1..], [0, 0, 0], "units left unowned: {figures:?}");
        assert!(*moves <= 2 * total / 8, "{figures:?}");
    }
}

#[test]
fn a_process_restarted_under_its_process_id_keeps_its_units_and_counts_at_once() {
    // Restart under the same identity (a StatefulSet's pod name as the process id): the new
    // incarnation's first heartbeat finds its row live and settled, owns its units already, and
    // nothing moves.
    let total = 100;
    let fleet = Fleet::new(total);
    let mut configs: Vec<Config> = (0..4).map(|_| probation()).collect();
    for (i, config) in configs.iter_mut().enumerate() {
        config.process_id = Some(format!("00000000-0000-0000-0000-00000000000{i}"));
    }
    let made: Vec<(Leaser, Arc<Recorder>)> =
        configs.iter().map(|c| fleet.leaser(c.clone())).collect();
    let mut leasers: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    let rounds = rounds_until_exact(&leasers, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    let before = fleet.ownership();
    let (restarted, recorder) = fleet.leaser(configs[2].clone());
    leasers[2] = &restarted;
    let after_restart = round(&leasers);
    assert_eq!(after_restart, vec![25; 4], "nothing moves at a restart");
    assert_eq!(moved(&before, &fleet.ownership()), 0);
    assert_eq!(recorder.lost(), 0);
    assert_disjoint(&fleet, &leasers);
}

#[test]
fn a_process_back_from_a_lapse_before_anyone_took_its_units_makes_nobody_shed() {
    // A process paused past its TTL (a stop-the-world pause, a blocked leaser) whose units nobody
    // claimed meanwhile: it forgets them at its local deadline, and its next heartbeat makes its
    // row live again with those units still naming it. That heartbeat must not report zero units:
    // the others compute their fair share from it and would shed for a process that seems to own
    // nothing.
    let total = 100;
    let fleet = Fleet::new(total);
    let mut short = probation();
    short.ttl = Duration::from_millis(400);
    short.heartbeat_interval = Duration::from_millis(130);
    let (paused, paused_recorder) = fleet.leaser(short);
    let others: Vec<(Leaser, Arc<Recorder>)> = (0..3).map(|_| fleet.leaser(probation())).collect();
    let mut all: Vec<&Leaser> = vec![&paused];
    all.extend(others.iter().map(|(l, _)| l));
    let rounds = rounds_until_exact(&all, total, 3);
    assert!(exact(rounds.last().unwrap(), total), "{rounds:?}");
    let before = fleet.ownership();
    // The pause: no heartbeat until its row expired by the database clock and its local deadline
    // passed; a tick then finds it not live and forgets its units.
    fleet.wait_until_expired(&paused);
    crate::common::wait_for("the local deadline", Duration::from_secs(5), || {
        paused
            .live_until()
            .is_none_or(|until| until <= std::time::Instant::now())
            .then_some(())
    });
    paused.tick().unwrap();
    assert_eq!(paused.owned().len(), 0, "forgotten at the lapse");
    paused.heartbeat().unwrap();
    let rest: Vec<&Leaser> = others.iter().map(|(l, _)| l).collect();
    assert_eq!(
        round(&rest),
        vec![25; 3],
        "the others shed for the lapsed process"
    );
    paused.tick().unwrap();
    assert_eq!(paused.owned().len(), 25, "its units, read back");
    assert_eq!(moved(&before, &fleet.ownership()), 0, "no unit moved");
    let shed: usize = others.iter().map(|(_, r)| r.lost()).sum();
    assert_eq!(shed, 0);
    assert!(paused_recorder.lost() >= 25, "the lapse was reported");
    assert_disjoint(&fleet, &all);
}
