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
    let dbs: Vec<Db> = (0..3).map(|_| Db::connect(pg.url()).unwrap()).collect();
    candidate(&dbs[0], "setup").create_table().unwrap();
    let members: Vec<Leadership> = (dbs.iter().enumerate())
        .map(|(i, db)| candidate(db, &format!("m{i}")).campaign().unwrap())
        .collect();
    let (leader, mut term) = wait_for("a leader", Duration::from_secs(10), || leading(&members));
    for trial in 0..3 {
        elections(&members);
        pg.restart_after(DOWN).unwrap();
        let back = Instant::now();
        let (now_leads, new_term) = wait_for("a leader after the outage", TTL * 4, || {
            leading(&members).filter(|(_, t)| *t > term)
        });
        let took = back.elapsed();
        println!("trial {trial}: m{now_leads} leads with term {new_term} {took:?} after the return");
        assert_eq!(now_leads, leader, "trial {trial}: the leader changed");
        // Nobody else was elected meanwhile: the leader's is the only election since the outage.
        let elected = elections(&members);
        for (i, terms) in elected.iter().enumerate() {
            if i == leader {
                assert_eq!(terms, &[new_term], "trial {trial}");
            } else {
                assert!(terms.is_empty(), "trial {trial}: m{i} was elected {terms:?}");
            }
        }
        // Within one poll of its pool's return (its reconnect back-off: 500 ms), and slack.
        assert!(took <= RETRY + Duration::from_secs(1), "trial {trial}: {took:?}");
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
    let server: SocketAddr = format!("127.0.0.1:{}", pg.port()).parse().unwrap();
    // The first member reaches the server through a proxy: cutting it for good is its crash.
    let proxy = Proxy::start(0, server).unwrap();
    let mut config = proxy.config();
    config.dbname("postgres");
    let via_proxy = DbBuilder::from_config(config)
        .connection_timeout(Duration::from_secs(1))
        .unwrap()
        .build()
        .unwrap();
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
    let dbs: Vec<Db> = (0..3).map(|_| Db::connect(pg.url()).unwrap()).collect();
    let units = Units::new(&dbs[0]);
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
        let balanced = (running.iter())
            .all(|r| map.values().filter(|(o, _)| o == r.leaser().process_id()).count() == 4);
        balanced.then_some(map)
    });
    for g in &gains {
        g.0.lock().clear();
    }
    pg.restart_after(DOWN).unwrap();
    let back = Instant::now();
    // Every process owns its units again, by its own account.
    wait_for("every process to own its units again", TTL * 4, || {
        let again = running.iter().all(|r| {
            let mine = r.leaser().owned();
            mine.len() == 4
                && (mine.iter()).all(|u| before[u].0 == r.leaser().process_id())
        });
        again.then_some(())
    });
    println!("every unit back with its process {:?} after the return", back.elapsed());
    // Nobody claimed anything: every unit has its owner and its token of before.
    let after = settled(&units, UNITS).expect("every unit owned");
    assert_eq!(after, before);
    // And no process was ever given another's unit.
    for (r, g) in running.iter().zip(&gains) {
        let theirs: Vec<Unit> = (g.0.lock().iter())
            .filter(|u| before[*u].0 != r.leaser().process_id())
            .cloned()
            .collect();
        assert!(theirs.is_empty(), "{} gained {theirs:?}", r.leaser().process_id());
    }
    for r in running {
        r.stop().unwrap();
    }
    pg.stop().unwrap();
}
