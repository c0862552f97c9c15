//! The outage rule under the checker, with a failover as the outage: three processes, each with a
//! campaign and a leaser sharing 12 units, write fenced ledger rows for their leadership and their
//! units every few milliseconds under CPU load in bursts; the primary stops as a crash would and
//! its standby is promoted 2 s later, longer than the TTL, so every tenure and every process row
//! lapses. With a synchronous standby, and with an asynchronous one that lost the last commits:
//!
//! - safety as always: in ledger order, per leadership and per unit, terms and tokens never go
//!   down and each belongs to one writer, and no unit is gained while another process works on it;
//! - the outage rule's promise: the member that led before leads after (and nobody else is elected
//!   meanwhile), and every unit stays with its process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::campaigns::{assert_only_elected, elections, leading, Owners};
use crate::common::load::{Load, Rng};
use crate::common::registry::{Registry, Worker};
use crate::common::wait_for;
use pgtenure::elector::{Elector, Leadership};
use pgtenure::membership::{Config, Leaser, Running, Unit, Units};
use pgtenure::testing::{ReplicatedPostgres, Replication};
use pgtenure::Db;

use super::{assert_ledger_ordered, create_tables, init_logs, ledger, pool, Looping};

const TTL: Duration = Duration::from_millis(1500);
const RETRY: Duration = Duration::from_millis(500);
/// From the primary's stop to the standby's promotion: longer than the TTL.
const DOWN: Duration = Duration::from_secs(2);
const UNITS: usize = 12;
/// How often each process writes: its leadership's row, if it leads, and one of its units'.
const WRITE_EVERY: Duration = Duration::from_millis(30);
/// How long the fleet writes before the failover, and after it once it settled again.
const WRITING: Duration = Duration::from_secs(2);

/// Three processes on the replicated servers' two-host URL, each writing fenced rows.
struct Fleet {
    units: Units,
    campaigns: Vec<Arc<Leadership>>,
    running: Vec<Running>,
    registry: Arc<Registry>,
    writers: Vec<Looping>,
    /// Acknowledged fenced writes: (leadership, unit).
    acked: Arc<(AtomicUsize, AtomicUsize)>,
}

impl Fleet {
    fn start(pg: &ReplicatedPostgres) -> Fleet {
        let dbs: Vec<Db> = (0..3).map(|_| pool(pg)).collect();
        create_tables(&dbs[0], pg.primary_url());
        let units = Units::new(&dbs[0]);
        units.create_tables().unwrap();
        let all: Vec<Unit> = (0..UNITS as i32)
            .map(|shard| Unit::new("t", shard).unwrap())
            .collect();
        units.add(&all).unwrap();
        let candidate = |i: usize| {
            (Elector::new(&dbs[i]).with_holder(&format!("m{i}")).unwrap())
                .with_ttl(TTL)
                .unwrap()
                .with_retry_period(RETRY)
                .unwrap()
        };
        let mut campaigns = vec![Arc::new(candidate(0).campaign().unwrap())];
        wait_for("m0 to lead", Duration::from_secs(10), || {
            leading(&campaigns)
        });
        campaigns.extend((1..3).map(|i| Arc::new(candidate(i).campaign().unwrap())));
        let mut config = Config::default();
        config.ttl = TTL;
        config.heartbeat_interval = RETRY;
        config.rebalance_interval = RETRY;
        config.warm_up = Some(Duration::ZERO);
        let registry = Arc::new(Registry::default());
        let running: Vec<Running> = (0..3)
            .map(|id| {
                let worker = Arc::new(Worker {
                    registry: registry.clone(),
                    id,
                    drain_ms: 0,
                });
                let running = (Leaser::new(&dbs[id], worker, config.clone()).unwrap())
                    .spawn()
                    .unwrap();
                registry.watch(id, running.leaser());
                running
            })
            .collect();
        let acked = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let writers = (0..3)
            .map(|i| {
                let (db, campaign) = (dbs[i].clone(), campaigns[i].clone());
                let (leaser, acked) = (running[i].leaser().clone(), acked.clone());
                let mut rng = Rng::new(i as u64);
                Looping::start(WRITE_EVERY, move || {
                    if let Some(term) = campaign.term() {
                        if write(&db, &format!("m{i}"), "leader", term, |tx| {
                            campaign.elector().fence(tx, term)
                        }) {
                            acked.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    let owned = leaser.owned();
                    if owned.is_empty() {
                        return;
                    }
                    let unit = &owned[rng.below(owned.len() as u64) as usize];
                    let Some(fence) = leaser.fence_statement(unit) else {
                        return;
                    };
                    let token = fence.params().last().and_then(|p| p.as_i64()).unwrap();
                    let key = format!("unit {unit}");
                    if write(&db, leaser.process_id(), &key, token, |tx| fence.check(tx)) {
                        acked.1.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let fleet = Fleet {
            units,
            campaigns,
            running,
            registry,
            writers,
            acked,
        };
        wait_for("the units to be shared", Duration::from_secs(30), || {
            fleet.settled()
        });
        fleet
    }

    /// Who leads, and who owns each unit under which token, once one member leads and every unit
    /// is owned by a live process, a third of them each.
    fn settled(&self) -> Option<(usize, Owners)> {
        crate::common::campaigns::settled(&self.units, &self.campaigns, &self.running, UNITS)
    }

    fn acked(&self) -> (usize, usize) {
        (
            self.acked.0.load(Ordering::SeqCst),
            self.acked.1.load(Ordering::SeqCst),
        )
    }

    fn stop(mut self) {
        for writer in &mut self.writers {
            writer.stop();
        }
        for campaign in self.campaigns {
            Arc::into_inner(campaign).unwrap().stop().unwrap();
        }
        for running in self.running {
            running.stop().unwrap();
        }
    }
}

/// One transaction: `fence`, then a ledger row of `token` for `key`; whether it committed.
fn write(
    db: &Db,
    owner: &str,
    key: &str,
    token: i64,
    fence: impl FnOnce(&mut pgtenure::postgres::Transaction<'_>) -> pgtenure::Result<bool>,
) -> bool {
    let attempt = || -> Result<bool, Box<dyn std::error::Error>> {
        let mut conn = db.connection()?;
        let mut tx = conn.transaction()?;
        if !fence(&mut tx)? {
            return Ok(false);
        }
        tx.execute(
            "INSERT INTO ledger (key, token, owner, write) VALUES ($1, $2, $3, 0)",
            &[&key, &token, &owner],
        )?;
        tx.commit()?;
        Ok(true)
    };
    attempt().unwrap_or(false)
}

fn trial(replication: Replication) {
    init_logs();
    let pg = ReplicatedPostgres::start(replication).unwrap();
    let fleet = Fleet::start(&pg);
    let _load = Load::start(7);
    let (leader, owners) = wait_for("a settled fleet", Duration::from_secs(30), || {
        fleet.settled()
    });
    let term = fleet.campaigns[leader].term().unwrap();
    elections(&fleet.campaigns);
    wait_for("fenced writes before the failover", WRITING * 5, || {
        let (leads, units) = fleet.acked();
        (leads >= 20 && units >= 20).then_some(())
    });
    if replication == Replication::Asynchronous {
        // The standby stops receiving: what the fleet commits from now on (renewals, heartbeats,
        // ledger rows) is lost by the promotion.
        pg.freeze_replication();
        wait_for("commits the standby will not have", WRITING * 5, || {
            (pg.replication_lag().ok()? > 0).then_some(())
        });
    }
    let before = fleet.acked();
    let outage = pg.fail_over_after(DOWN).unwrap();
    let back = Instant::now();
    let (now_leads, new_term) = wait_for("a leader after the failover", TTL * 6, || {
        leading(&fleet.campaigns).filter(|(_, t)| *t > term)
    });
    let elected_after = back.elapsed();
    assert_eq!(now_leads, leader, "{replication:?}: the leader changed");
    let what = format!("{replication:?}");
    assert_only_elected(&fleet.campaigns, leader, new_term, &what);
    let (_, after) = wait_for("a settled fleet after the failover", TTL * 6, || {
        fleet.settled()
    });
    let settled_after = back.elapsed();
    let moved: Vec<&Unit> = (owners.iter())
        .filter(|(unit, (owner, _))| after[*unit].0 != *owner)
        .map(|(unit, _)| unit)
        .collect();
    assert!(moved.is_empty(), "{replication:?}: units moved: {moved:?}");
    assert_eq!(after, owners, "{replication:?}: a unit was claimed anew");
    wait_for("fenced writes after the failover", WRITING * 5, || {
        let (leads, units) = fleet.acked();
        (leads >= before.0 + 20 && units >= before.1 + 20).then_some(())
    });
    let registry = fleet.registry.clone();
    fleet.stop();
    let rows = ledger(pg.url());
    assert_ledger_ordered(&rows);
    assert_eq!(
        registry.violations(),
        0,
        "{replication:?}: a unit worked on twice"
    );
    let written = |key: &str, since: i64| {
        (rows.iter())
            .filter(|r| (r.1 == "leader") == (key == "leader") && r.2 > since)
            .count()
    };
    println!(
        "{replication:?}: writes impossible for {outage:?}; m{now_leads} leads again with term \
         {new_term} (was {term}) {elected_after:?} after, every unit with its process \
         {settled_after:?} after; ledger: {} rows, {} by the leader under its new term",
        rows.len(),
        written("leader", term),
    );
    pg.stop().unwrap();
}

#[test]
fn a_synchronous_failover_longer_than_the_ttl_keeps_the_leader_and_every_unit_where_it_was() {
    trial(Replication::Synchronous);
}

#[test]
fn an_asynchronous_failover_that_lost_commits_keeps_the_leader_and_every_unit_where_it_was() {
    trial(Replication::Asynchronous);
}
