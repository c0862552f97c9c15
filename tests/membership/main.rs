//! Membership against a real PostgreSQL: processes are `Leaser`s driven by hand (or by `run`). One
//! file per concern: fair shares (`balance`), processes that leave, crash and lapse
//! (`departures`), units changed under their owners (`units`), setting up and running the loop
//! (`running`), what the reconciler hears (`delivery`).

#[path = "../common/mod.rs"]
mod common;

mod balance;
mod delivery;
mod departures;
mod probation;
mod running;
mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::{client, db, Tables};
use parking_lot::Mutex;
use pgtenure::membership::{Config, Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::postgres;
use pgtenure::Db;

/// Records what the leaser reports, and says which units have work in flight.
#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<(&'static str, Vec<Unit>)>>,
    /// Each `units_lost` call's reason and units, in order.
    losses: Mutex<Vec<(UnitLoss, Vec<Unit>)>>,
    busy: Mutex<BTreeSet<Unit>>,
}

impl Recorder {
    /// How many units it was told it lost, in all.
    fn lost(&self) -> usize {
        self.events
            .lock()
            .iter()
            .filter(|(kind, _)| *kind == "lost")
            .map(|(_, units)| units.len())
            .sum()
    }

    /// How many units it was told it lost for `reason`, in all.
    fn lost_for(&self, reason: UnitLoss) -> usize {
        self.losses
            .lock()
            .iter()
            .filter(|(r, _)| *r == reason)
            .map(|(_, units)| units.len())
            .sum()
    }
}

impl Reconciler for Recorder {
    fn units_gained(&self, units: &[Unit]) {
        self.events.lock().push(("gained", units.to_vec()));
    }
    fn units_lost(&self, units: &[Unit], reason: UnitLoss) {
        self.events.lock().push(("lost", units.to_vec()));
        self.losses.lock().push((reason, units.to_vec()));
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
        let leaser = Leaser::new(&self.db, recorder.clone(), config)
            .unwrap()
            .with_tables(&self.processes, &self.units_table)
            .unwrap();
        (leaser, recorder)
    }

    /// A leaser of this fleet on `db`, telling `reconciler`.
    fn leaser_with(&self, db: &Db, reconciler: Arc<dyn Reconciler>, config: Config) -> Leaser {
        Leaser::new(db, reconciler, config)
            .unwrap()
            .with_tables(&self.processes, &self.units_table)
            .unwrap()
    }

    /// Locks every unit in an open transaction of `client`, as an operator's statement in progress.
    fn hold_units<'c>(&self, client: &'c mut postgres::Client) -> postgres::Transaction<'c> {
        let mut tx = client.transaction().unwrap();
        tx.execute(
            &format!("SELECT 1 FROM {} FOR UPDATE", self.units_table),
            &[],
        )
        .unwrap();
        tx
    }

    /// A leaser on a pool of its own whose sessions carry `application_name`, so that a test can
    /// find its statements in `pg_stat_activity`.
    fn leaser_named(&self, application_name: &str, config: Config) -> (Leaser, Arc<Recorder>) {
        self.leaser_named_with(application_name, None, config)
    }

    /// As [`Fleet::leaser_named`], with server settings (`-c name=value ...`) for its sessions.
    fn leaser_named_with(
        &self,
        application_name: &str,
        options: Option<&str>,
        config: Config,
    ) -> (Leaser, Arc<Recorder>) {
        let mut connect: pgtenure::postgres::Config = crate::common::direct_url().parse().unwrap();
        connect.application_name(application_name);
        if let Some(options) = options {
            connect.options(options);
        }
        let db = pgtenure::DbBuilder::from_config(connect).build().unwrap();
        let recorder = Arc::new(Recorder::default());
        let leaser = Leaser::new(&db, recorder.clone(), config)
            .unwrap()
            .with_tables(&self.processes, &self.units_table)
            .unwrap();
        (leaser, recorder)
    }

    /// Whether a session of `application_name` is running a statement that waits for a lock.
    fn waits_for_a_lock(application_name: &str) -> bool {
        client()
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                 WHERE application_name = $1 AND state = 'active'
                                   AND wait_event_type = 'Lock')",
                &[&application_name],
            )
            .unwrap()
            .get(0)
    }

    /// Waits until `leaser`'s process row has expired by the database clock.
    fn wait_until_expired(&self, leaser: &Leaser) {
        let sql = format!(
            "SELECT expires_at <= now() FROM {} WHERE process_id = $1::text::uuid",
            self.processes
        );
        crate::common::wait_for("the process row to expire", Duration::from_secs(10), || {
            let expired: bool = client()
                .query_one(&sql, &[&leaser.process_id()])
                .unwrap()
                .get(0);
            expired.then_some(())
        });
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
    let mut config = common::hand_driven();
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

/// Runs `f` on a thread and says whether it returned within `within` (a hung call is left behind).
fn returns_within<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
}
