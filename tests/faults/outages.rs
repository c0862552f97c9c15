//! A database outage longer than the TTL in a healthy fleet changes nothing once the database is back
//! (the same leader leads, every unit stays with its process), and a leader that does not come back
//! is still replaced. Each test stops and starts a throwaway server of its own (restarting the
//! shared one would disturb the other tests); each member has a `Db` (a pool) of its own, as
//! separate processes would.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::proxy::Proxy;
use crate::common::wait_for;
use pgtenure::elector::{Elector, LeaderEvent, LeaderLoss, Leadership};
use pgtenure::membership::{Config, Leaser, Reconciler, Running, Unit, UnitLoss, Units};
use pgtenure::testing::TempPostgres;
use pgtenure::{Db, DbBuilder};

/// Above the pools' reconnect back-off (500 ms): every member reaches the database again within
/// one retry period of its return.
const RETRY: Duration = Duration::from_millis(600);
const TTL: Duration = Duration::from_millis(1500);
/// Longer than the TTL: every tenure lapses in the database.
const DOWN: Duration = Duration::from_secs(2);

/// How much later than the others the slow member reconnects: within one retry period.
const SLOW_RETURN: Duration = Duration::from_millis(350);

/// A proxy in front of `pg`.
fn proxied(pg: &TempPostgres) -> Proxy {
    let server: SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    Proxy::start(0, server).unwrap()
}

/// A pool of `proxy`'s, in front of a `TempPostgres`.
fn via(proxy: &Proxy) -> Db {
    let mut config = proxy.config();
    config.dbname("postgres");
    DbBuilder::from_config(config).build().unwrap()
}

fn candidate(db: &Db, holder: &str) -> Elector {
    Elector::new(db)
        .with_holder(holder)
        .unwrap()
        .with_ttl(TTL)
        .unwrap()
        .with_retry_period(RETRY)
        .unwrap()
}

/// The member that leads, and its term, once exactly one does.
fn leading(members: &[Leadership]) -> Option<(usize, i64)> {
    let leaders: Vec<(usize, i64)> = (members.iter().enumerate())
        .filter_map(|(i, m)| m.term().map(|term| (i, term)))
        .collect();
    (leaders.len() == 1).then(|| leaders[0])
}

/// Every `Elected` each member's channel holds (draining it).
fn elections(members: &[Leadership]) -> Vec<Vec<i64>> {
    (members.iter())
        .map(|m| {
            m.events()
                .try_iter()
                .filter_map(|event| match event {
                    LeaderEvent::Elected { term } => Some(term),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

#[test]
fn after_an_outage_longer_than_the_ttl_the_same_leader_leads_again() {
    let pg = TempPostgres::start().unwrap();
    // The leader reaches the server through a proxy that delays its new connections once the
    // outage begins: it comes back later than the others (the pools' reconnect back-offs started
    // together, at the server's stop), but within one retry period.
    let proxy = proxied(&pg);
    let mut dbs = vec![via(&proxy)];
    dbs.extend((0..2).map(|_| Db::connect(pg.url()).unwrap()));
    candidate(&dbs[1], "setup").create_table().unwrap();
    let mut members = vec![candidate(&dbs[0], "m0").campaign().unwrap()];
    let (leader, mut term) = wait_for("m0 to lead", Duration::from_secs(10), || leading(&members));
    members.extend(
        (dbs[1..].iter().enumerate())
            .map(|(i, db)| candidate(db, &format!("m{}", i + 1)).campaign().unwrap()),
    );
    proxy.set_connect_delay(SLOW_RETURN);
    for trial in 0..3 {
        elections(&members);
        pg.restart_after(DOWN).unwrap();
        let back = Instant::now();
        let (now_leads, new_term) = wait_for("a leader after the outage", TTL * 4, || {
            leading(&members).filter(|(_, t)| *t > term)
        });
        let took = back.elapsed();
        println!(
            "trial {trial}: m{now_leads} leads with term {new_term} {took:?} after the return"
        );
        assert_eq!(now_leads, leader, "trial {trial}: the leader changed");
        // Nobody else was elected meanwhile: the leader's is the only election since the outage.
        let elected = elections(&members);
        for (i, terms) in elected.iter().enumerate() {
            if i == leader {
                assert_eq!(terms, &[new_term], "trial {trial}");
            } else {
                assert!(
                    terms.is_empty(),
                    "trial {trial}: m{i} was elected {terms:?}"
                );
            }
        }
        // Within one poll of its pool's return (its reconnect back-off: 500 ms, and the proxy's
        // delay), and slack.
        assert!(
            took <= RETRY + SLOW_RETURN + Duration::from_secs(1),
            "trial {trial}: {took:?}"
        );
        term = new_term;
    }
    for member in members {
        member.stop().unwrap();
    }
    pg.stop().unwrap();
}

#[test]
fn a_leader_that_does_not_return_after_an_outage_is_replaced_one_retry_period_later_at_most() {
    let pg = TempPostgres::start().unwrap();
    // The first member reaches the server through a proxy: cutting it for good is its crash.
    let proxy = proxied(&pg);
    let via_proxy = via(&proxy);
    let direct: Vec<Db> = (0..2).map(|_| Db::connect(pg.url()).unwrap()).collect();
    candidate(&direct[0], "setup").create_table().unwrap();
    let first = candidate(&via_proxy, "m0").campaign().unwrap();
    wait_for("m0 to lead", Duration::from_secs(10), || first.term());
    let others: Vec<Leadership> = (direct.iter().enumerate())
        .map(|(i, db)| candidate(db, &format!("m{}", i + 1)).campaign().unwrap())
        .collect();
    assert!(others.iter().all(|m| !m.is_leading()));
    // The leader's process dies as the outage begins: it never reaches the database again.
    drop(proxy);
    pg.restart_after(DOWN).unwrap();
    let back = Instant::now();
    let (_, term) = wait_for("another member to lead", TTL * 4, || leading(&others));
    let took = back.elapsed();
    println!("m0 replaced with term {term} {took:?} after the return");
    // Its tenure lapsed during the outage: one reconnect back-off (500 ms), the deferral (one retry
    // period) and the next poll (one more), and slack.
    assert!(
        took <= RETRY * 2 + Duration::from_millis(500) + Duration::from_secs(1),
        "{took:?}"
    );
    assert!(matches!(
        first.events().try_iter().last(),
        Some(LeaderEvent::Lost {
            reason: LeaderLoss::Expired,
            ..
        })
    ));
    for member in others {
        member.stop().unwrap();
    }
    drop(first);
    pg.stop().unwrap();
}

/// Records every unit each process gained, in order.
#[derive(Default)]
struct Gains(parking_lot::Mutex<Vec<Unit>>);

impl Reconciler for Gains {
    fn units_gained(&self, units: &[Unit]) {
        self.0.lock().extend_from_slice(units);
    }
    fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
}

fn member_config() -> Config {
    let mut config = Config::default();
    config.ttl = TTL;
    // Above the pools' reconnect back-off (500 ms), as the campaign's retry period above.
    config.heartbeat_interval = RETRY;
    config.rebalance_interval = RETRY;
    config.sweep_interval = RETRY;
    config.sweep_cutoff = TTL * 2;
    config.warm_up = Some(Duration::ZERO);
    config
}

/// Who owns each unit, and under which token, once every unit is owned by a live process.
fn settled(units: &Units, owned: usize) -> Option<BTreeMap<Unit, (String, i64)>> {
    let rows = units.assignments().ok()?;
    let map: BTreeMap<Unit, (String, i64)> = (rows.into_iter())
        .filter(|a| a.owner_live)
        .filter_map(|a| Some((a.unit, (a.owner?, a.token?))))
        .collect();
    (map.len() == owned).then_some(map)
}

#[test]
fn after_an_outage_longer_than_the_ttl_every_unit_stays_with_its_process() {
    const UNITS: usize = 12;
    let pg = TempPostgres::start().unwrap();
    // The first process reaches the server through a proxy that delays its new connections once
    // the outage begins: it comes back later than the others (the pools' reconnect back-offs
    // started together, at the server's stop), but within one heartbeat interval.
    let proxy = proxied(&pg);
    let mut dbs = vec![via(&proxy)];
    dbs.extend((0..2).map(|_| Db::connect(pg.url()).unwrap()));
    let units = Units::new(&dbs[1]);
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..UNITS as i32)
        .map(|shard| Unit::new("t", shard).unwrap())
        .collect();
    units.add(&all).unwrap();
    let gains: Vec<Arc<Gains>> = (0..3).map(|_| Arc::default()).collect();
    let running: Vec<Running> = (dbs.iter().zip(&gains))
        .map(|(db, gains)| {
            Leaser::new(db, gains.clone(), member_config())
                .unwrap()
                .spawn()
                .unwrap()
        })
        .collect();
    // Balanced: 4 units each.
    let before = wait_for("the units to be shared", Duration::from_secs(15), || {
        let map = settled(&units, UNITS)?;
        let balanced = (running.iter()).all(|r| {
            map.values()
                .filter(|(o, _)| o == r.leaser().process_id())
                .count()
                == 4
        });
        balanced.then_some(map)
    });
    for g in &gains {
        g.0.lock().clear();
    }
    proxy.set_connect_delay(SLOW_RETURN);
    pg.restart_after(DOWN).unwrap();
    let back = Instant::now();
    // Every process owns its units again, by its own account.
    wait_for("every process to own its units again", TTL * 4, || {
        let again = running.iter().all(|r| {
            let mine = r.leaser().owned();
            mine.len() == 4 && (mine.iter()).all(|u| before[u].0 == r.leaser().process_id())
        });
        again.then_some(())
    });
    println!(
        "every unit back with its process {:?} after the return",
        back.elapsed()
    );
    // Nobody claimed anything: every unit has its owner and its token of before.
    let after = settled(&units, UNITS).expect("every unit owned");
    assert_eq!(after, before);
    // And no process was ever given another's unit.
    for (r, g) in running.iter().zip(&gains) {
        let theirs: Vec<Unit> = (g.0.lock().iter())
            .filter(|u| before[*u].0 != r.leaser().process_id())
            .cloned()
            .collect();
        assert!(
            theirs.is_empty(),
            "{} gained {theirs:?}",
            r.leaser().process_id()
        );
    }
    for r in running {
        r.stop().unwrap();
    }
    pg.stop().unwrap();
}

/// The figure of issue 37: three processes, each with a campaign and a leaser sharing 60 units
/// (TTL 2 s), the server stopped for 6 s and started again, three trials: how often the leader
/// changed, and how many units changed owner. `cargo test --test faults -- --ignored
/// outage_figure --nocapture`.
#[test]
#[ignore = "a measurement (about 40 s)"]
fn outage_figure() {
    outage_figure_with(false);
}

/// As [`outage_figure`], with the first process reconnecting 350 ms after the others (a proxy
/// delays its new connections), as processes do whose pools did not start their back-off together.
#[test]
#[ignore = "a measurement (about 40 s)"]
fn outage_figure_with_a_slow_return() {
    outage_figure_with(true);
}

fn outage_figure_with(slow: bool) {
    const UNITS: usize = 60;
    let ttl = Duration::from_secs(2);
    let pg = TempPostgres::start().unwrap();
    let proxy = proxied(&pg);
    let mut dbs: Vec<Db> = (0..3).map(|_| Db::connect(pg.url()).unwrap()).collect();
    if slow {
        dbs[0] = via(&proxy);
    }
    let units = Units::new(&dbs[0]);
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..UNITS as i32)
        .map(|shard| Unit::new("t", shard).unwrap())
        .collect();
    units.add(&all).unwrap();
    let elector = |db: &Db, i: usize| {
        Elector::new(db)
            .with_holder(&format!("m{i}"))
            .unwrap()
            .with_ttl(ttl)
            .unwrap()
    };
    elector(&dbs[0], 9).create_table().unwrap();
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = ttl / 3;
    config.rebalance_interval = ttl / 3;
    config.warm_up = Some(Duration::ZERO);
    let processes: Vec<(Leadership, Running)> = (dbs.iter().enumerate())
        .map(|(i, db)| {
            let leaser = Leaser::new(db, Arc::new(Gains::default()), config.clone()).unwrap();
            (elector(db, i).campaign().unwrap(), leaser.spawn().unwrap())
        })
        .collect();
    let campaigns: Vec<&Leadership> = processes.iter().map(|(c, _)| c).collect();
    let settled_fleet = || {
        let map = settled(&units, UNITS)?;
        let leader = (campaigns.iter()).position(|c| c.is_leading())?;
        let balanced = (processes.iter()).all(|(_, r)| {
            map.values()
                .filter(|(o, _)| o == r.leaser().process_id())
                .count()
                == UNITS / 3
        });
        balanced.then_some((leader, map))
    };
    let (mut changed, mut moved) = (0, 0);
    proxy.set_connect_delay(SLOW_RETURN);
    for trial in 0..3 {
        let (leader, before) = wait_for("a settled fleet", Duration::from_secs(30), settled_fleet);
        pg.restart_after(Duration::from_secs(6)).unwrap();
        // Real time is the subject: the fleet has two TTLs to do whatever it does after the
        // return, then it is compared with before.
        std::thread::sleep(ttl * 2);
        let (now_leads, after) =
            wait_for("a settled fleet", Duration::from_secs(30), settled_fleet);
        let owners_moved = (before.iter())
            .filter(|(unit, (owner, _))| after[*unit].0 != *owner)
            .count();
        let claimed = (before.iter())
            .filter(|(unit, (_, token))| after[*unit].1 != *token)
            .count();
        println!("trial {trial}: leader m{leader} -> m{now_leads}, {owners_moved} of {UNITS} units changed owner, {claimed} were claimed anew");
        changed += usize::from(now_leads != leader);
        moved += owners_moved;
    }
    println!("outage figure (slow return: {slow}): the leader changed in {changed} of 3 trials, {moved} of {} units moved", UNITS * 3);
    for (campaign, running) in processes {
        campaign.stop().unwrap();
        running.stop().unwrap();
    }
    pg.stop().unwrap();
}
