#![allow(dead_code)]

//! A rolling upgrade of a membership fleet: "old" processes run the previous release's statements
//! (`tests/fixtures/membership_before_settled/`, the `sql/membership/` files of commit a4c4d70, the
//! last before the processes table got its `settled` column) beside processes of this build, both
//! against tables migrated to this build's schema: the old processes start on the previous
//! release's processes table, and the first new instance migrates it while they run, as a deploy
//! does. Every process writes for the units it owns
//! through the unit's fence; the ledger proves that no two processes worked on a unit at once and
//! that tokens only grew, and at the end every unit has one live owner.
//!
//! An old process is what the previous release's `Leaser` did, reduced to its statements: a
//! heartbeat (its local deadline counted from before it was sent), a read of what it owns, the
//! tick's stats read for the number of live processes, a claim up to its share, a shed above it,
//! and fenced writes while its deadline has not passed. Its statements never name `settled`: its
//! rows take the column's default (true), so new processes count it at once, as they did before.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pgtenure::membership::{Config, Leaser, Unit, Units};
use pgtenure::postgres::types::Type;
use pgtenure::postgres::{self, NoTls};

use crate::common::{direct_url, ledger, wait_for, Quiet, Running, Tables};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/membership_before_settled"
);

/// The previous release's statement `name`, rendered for the two tables.
fn old_sql(name: &str, procs: &str, units: &str) -> String {
    let text = std::fs::read_to_string(format!("{DIR}/{name}.sql")).expect("fixture");
    text.replace("{units:token_seq}", &format!("\"{units}_token_seq\""))
        .replace("{processes}", &format!("\"{procs}\""))
        .replace("{units}", &format!("\"{units}\""))
        .replace("{table}", &format!("\"{procs}\""))
}

/// What the fleet did.
#[derive(Debug)]
pub struct Figures {
    pub units: usize,
    pub old_processes: usize,
    pub new_processes: usize,
    pub duration: Duration,
    /// Fenced writes by old and by new processes.
    pub old_writes: u64,
    pub new_writes: u64,
    /// Tenures (unit, token) that wrote, and writes in all.
    pub tenures: usize,
    pub writes: usize,
    /// Units the old processes claimed, over the run.
    pub old_claimed: u64,
    /// Heartbeats of old processes that found their row expired (their units lost).
    pub old_lapses: u64,
    /// How long the first new instance's `migrate` took, the old processes running.
    pub migrate_took: Duration,
    /// Violations found: a token that wrote after a higher one, or a token with two owners (the
    /// ledger proof panics on either, so a finished run found 0).
    pub violations: usize,
}

/// Runs `old` old and `new` new processes over `units` units for `duration`, the tables made
/// with the previous release's DDL first and migrated, then checks the ledger. With `replace`,
/// the old processes are replaced one by one during the run, as a rolling deploy does: each stops
/// as a crash would (its units move once its row expires) and a new process starts in its place.
pub fn rolling_upgrade(
    units: usize,
    old: usize,
    new: usize,
    duration: Duration,
    replace: bool,
) -> Figures {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let mut admin = postgres::Client::connect(&direct_url(), NoTls).unwrap();
    // The previous release's tables, with its statements' layout...
    admin
        .batch_execute(&old_sql("create_processes", &procs, &units_t))
        .unwrap();
    let db = crate::common::db();
    let handle = Units::new(&db).with_tables(&procs, &units_t).unwrap();
    // The units table had not changed since, so it is made as that release made it (beside a
    // processes table of its own that nothing uses), and its units are added by hand.
    let spare = tables.name("spare");
    Units::new(&db)
        .with_tables(&spare, &units_t)
        .unwrap()
        .create_tables()
        .unwrap();
    admin
        .batch_execute(&format!(
            "INSERT INTO \"{units_t}\" (tenant, shard) SELECT 't', g FROM generate_series(0, {}) g",
            units - 1
        ))
        .unwrap();
    // The processes table is migrated by the first new instance to start, while the old
    // processes run (below).
    let plans = pgtenure::migrations::plan(
        &db,
        &pgtenure::migrations::Tables::default()
            .with_membership(&procs, &units_t)
            .unwrap(),
    )
    .unwrap();
    let found = plans.iter().find(|p| p.kind() == "processes").unwrap();
    assert_eq!((found.recorded_version(), found.version()), (None, Some(2)));
    let ledger_t = ledger::create(&mut tables);
    let done = Arc::new(AtomicBool::new(false));
    let old_writes = Arc::new(AtomicU64::new(0));
    let old_claimed = Arc::new(AtomicU64::new(0));
    let old_lapses = Arc::new(AtomicU64::new(0));
    let mut config = Config::default();
    config.ttl = Duration::from_millis(900);
    config.heartbeat_interval = Duration::from_millis(200);
    config.rebalance_interval = Duration::from_millis(100);
    let start = Instant::now();
    // Old process i stops at its turn when replacing, else at the end.
    let turn = |i: usize| start + duration * (i as u32 + 1) / (old as u32 + 1);
    let olds: Vec<_> = (0..old)
        .map(|i| {
            let (done, writes, claimed) = (done.clone(), old_writes.clone(), old_claimed.clone());
            let lapses = old_lapses.clone();
            let (procs, units_t, ledger_t) = (procs.clone(), units_t.clone(), ledger_t.clone());
            let ttl = config.ttl;
            let stop_at = replace.then(|| turn(i));
            thread::spawn(move || {
                let mut process = OldProcess::new(i, &procs, &units_t, &ledger_t, units, ttl);
                while !done.load(Ordering::SeqCst) && stop_at.is_none_or(|t| Instant::now() < t) {
                    process.round(&writes, &claimed, &lapses);
                    // Real time is the subject: an old process's round (heartbeat, claims,
                    // writes) every 100 ms, as the previous release's loop paced it.
                    thread::sleep(Duration::from_millis(100));
                }
                process.leave();
            })
        })
        .collect();
    // The first new instance starts: it migrates the processes table (adds `settled`) while the
    // old processes heartbeat, claim and write.
    wait_for(
        "the old processes to claim units",
        Duration::from_secs(15),
        || (old_claimed.load(Ordering::SeqCst) > 0).then_some(()),
    );
    let migrating = Instant::now();
    handle.create_tables().unwrap();
    let migrate_took = migrating.elapsed();
    let make = || {
        Arc::new(
            Leaser::new(&db, Arc::new(Quiet), config.clone())
                .unwrap()
                .with_tables(&procs, &units_t)
                .unwrap(),
        )
    };
    let leasers: Arc<parking_lot::Mutex<Vec<Arc<Leaser>>>> =
        Arc::new(parking_lot::Mutex::new((0..new).map(|_| make()).collect()));
    let mut running: Vec<Running> = leasers
        .lock()
        .iter()
        .map(|l| Running::start(l.clone()))
        .collect();
    let new_writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (leasers, done, writes, ledger_t) = (
            leasers.clone(),
            done.clone(),
            new_writes.clone(),
            ledger_t.clone(),
        );
        thread::spawn(move || {
            let db = crate::common::db();
            let insert = format!("INSERT INTO {ledger_t} (key, token, owner) VALUES ($1, $2, $3)");
            let mut round = 0;
            while !done.load(Ordering::SeqCst) {
                round += 1;
                let leasers = leasers.lock().clone();
                for leaser in &leasers {
                    let owned = leaser.owned();
                    let from = round * 6 % owned.len().max(1);
                    for unit in owned.into_iter().cycle().skip(from).take(6) {
                        let Ok(mut conn) = db.connection() else {
                            continue;
                        };
                        let Ok(mut tx) = conn.transaction() else {
                            continue;
                        };
                        let token = leaser.token(&unit).unwrap_or(-1);
                        if let Ok(true) = leaser.fence(&mut tx, &unit) {
                            let owner = leaser.process_id();
                            if tx
                                .execute(&insert, &[&unit.to_string(), &token, &owner])
                                .is_ok()
                                && tx.commit().is_ok()
                            {
                                writes.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                }
                // Real time is the subject: a new process's worker writes to its units about
                // every 20 ms while the deploy goes on.
                thread::sleep(Duration::from_millis(20));
            }
        })
    };
    if replace {
        for i in 0..old {
            // Real time is the subject: the deploy replaces one old process per turn.
            thread::sleep(turn(i).saturating_duration_since(Instant::now()));
            let leaser = make();
            running.push(Running::start(leaser.clone()));
            leasers.lock().push(leaser);
        }
    }
    // Real time is the subject: the fleet runs side by side this long.
    thread::sleep((start + duration).saturating_duration_since(Instant::now()));
    // Every unit has one live owner, old or new.
    let owned_by_live = format!(
        "SELECT count(*) FROM \"{units_t}\" u JOIN \"{procs}\" p ON p.process_id = u.process_id
          WHERE p.expires_at > now()"
    );
    wait_for(
        "every unit to have a live owner",
        Duration::from_secs(15),
        || {
            let n: i64 = admin.query_one(&owned_by_live, &[]).unwrap().get(0);
            (n == units as i64).then_some(())
        },
    );
    done.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    for t in olds {
        t.join().unwrap();
    }
    for run in &mut running {
        run.stop();
    }
    let proof = ledger::assert_ordered(&ledger_t);
    let figures = Figures {
        units,
        old_processes: old,
        new_processes: new + if replace { old } else { 0 },
        duration,
        old_writes: old_writes.load(Ordering::SeqCst),
        new_writes: new_writes.load(Ordering::SeqCst),
        tenures: proof.tenures,
        writes: proof.writes,
        old_claimed: old_claimed.load(Ordering::SeqCst),
        old_lapses: old_lapses.load(Ordering::SeqCst),
        migrate_took,
        violations: 0,
    };
    assert!(figures.old_writes > 0, "no old process wrote: {figures:?}");
    assert!(figures.new_writes > 0, "no new process wrote: {figures:?}");
    figures
}

/// A process of the previous release, reduced to its statements.
struct OldProcess {
    id: String,
    client: postgres::Client,
    heartbeat: String,
    stats: String,
    owned_sql: String,
    claim: String,
    shed: String,
    fence: String,
    insert: String,
    units: usize,
    ttl: Duration,
    deadline: Option<Instant>,
    /// What it owns by the database's last answer: unit -> token.
    owned: BTreeMap<(String, i32), (i64, i32)>,
    rng: u64,
    round: usize,
}

impl OldProcess {
    fn new(
        i: usize,
        procs: &str,
        units_t: &str,
        ledger: &str,
        units: usize,
        ttl: Duration,
    ) -> OldProcess {
        let sql = |name| old_sql(name, procs, units_t);
        let mut client = postgres::Client::connect(&direct_url(), NoTls).unwrap();
        let id: String = client
            .query_one("SELECT gen_random_uuid()::text", &[])
            .unwrap()
            .get(0);
        OldProcess {
            id,
            client,
            heartbeat: sql("heartbeat"),
            stats: sql("stats"),
            owned_sql: sql("owned"),
            claim: sql("claim"),
            shed: sql("shed"),
            fence: sql("fence"),
            insert: format!("INSERT INTO {ledger} (key, token, owner) VALUES ($1, $2, $3)"),
            units,
            ttl,
            deadline: None,
            owned: BTreeMap::new(),
            rng: 0x9e37_79b9 + i as u64,
            round: 0,
        }
    }

    fn live(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() < d)
    }

    fn reported(&self) -> (i32, i64) {
        let weight = self.owned.values().map(|(_, w)| i64::from(*w)).sum();
        (self.owned.len() as i32, weight)
    }

    /// One heartbeat and tick of the previous release, then a few fenced writes.
    fn round(&mut self, writes: &AtomicU64, claimed: &AtomicU64, lapses: &AtomicU64) {
        let (count, weight) = self.reported();
        let sent = Instant::now();
        let ttl_us = self.ttl.as_micros() as i64;
        let beat = self.client.query_typed(
            &self.heartbeat,
            &[
                (&self.id, Type::TEXT),
                (&ttl_us, Type::INT8),
                (&count, Type::INT4),
                (&weight, Type::INT8),
                (&"old-host", Type::TEXT),
                (&"previous", Type::TEXT),
            ],
        );
        match beat {
            Ok(rows) => {
                let lapsed: bool = rows[0].get("lapsed");
                if lapsed {
                    if !self.owned.is_empty() {
                        lapses.fetch_add(1, Ordering::SeqCst);
                    }
                    self.owned.clear();
                }
                self.deadline = Some(sent + self.ttl);
            }
            Err(_) => return,
        }
        // What it owns, by the database.
        let Ok(rows) = self
            .client
            .query_typed(&self.owned_sql, &[(&self.id, Type::TEXT)])
        else {
            return;
        };
        self.owned = rows
            .iter()
            .map(|r| {
                (
                    (r.get("tenant"), r.get("shard")),
                    (
                        r.get::<_, Option<i64>>("token").unwrap_or(-1),
                        r.get("weight"),
                    ),
                )
            })
            .collect();
        let Ok(stats) = self
            .client
            .query_typed(&self.stats, &[(&self.id, Type::TEXT)])
        else {
            return;
        };
        let live: i64 = stats[0].get("live");
        let share = self.units.div_ceil(live.max(1) as usize);
        let (count, weight) = self.reported();
        if self.owned.len() < share && self.live() {
            let limit = (share - self.owned.len()) as i32;
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let slot = (self.rng % 2_147_483_647) as i32;
            if let Ok(rows) = self.client.query_typed(
                &self.claim,
                &[
                    (&self.id, Type::TEXT),
                    (&limit, Type::INT4),
                    (&i64::MAX, Type::INT8),
                    (&slot, Type::INT4),
                    (&count, Type::INT4),
                    (&weight, Type::INT8),
                    (&false, Type::BOOL),
                ],
            ) {
                claimed.fetch_add(rows.len() as u64, Ordering::SeqCst);
                for r in &rows {
                    self.owned.insert(
                        (r.get("tenant"), r.get("shard")),
                        (r.get("token"), r.get("weight")),
                    );
                }
            }
        } else if self.owned.len() > share + 1 {
            let excess: Vec<(String, i32)> = self
                .owned
                .keys()
                .take(self.owned.len() - share)
                .cloned()
                .collect();
            let tenants: Vec<&str> = excess.iter().map(|(t, _)| t.as_str()).collect();
            let shards: Vec<i32> = excess.iter().map(|(_, s)| *s).collect();
            let (count, weight) = (count - excess.len() as i32, weight);
            if let Ok(rows) = self.client.query_typed(
                &self.shed,
                &[
                    (&self.id, Type::TEXT),
                    (&tenants, Type::TEXT_ARRAY),
                    (&shards, Type::INT4_ARRAY),
                    (&count, Type::INT4),
                    (&weight, Type::INT8),
                ],
            ) {
                for r in &rows {
                    self.owned.remove(&(r.get("tenant"), r.get("shard")));
                }
            }
        }
        // Work: fenced writes, only while its local deadline has not passed.
        self.round += 1;
        let from = self.round * 6 % self.owned.len().max(1);
        let units: Vec<((String, i32), i64)> = self
            .owned
            .iter()
            .cycle()
            .skip(from)
            .take(6.min(self.owned.len()))
            .map(|(u, (t, _))| (u.clone(), *t))
            .collect();
        for ((tenant, shard), token) in units {
            if !self.live() {
                break;
            }
            let Ok(mut tx) = self.client.transaction() else {
                return;
            };
            let fenced = tx.query_typed(
                &self.fence,
                &[
                    (&self.id, Type::TEXT),
                    (&tenant, Type::TEXT),
                    (&shard, Type::INT4),
                    (&token, Type::INT8),
                ],
            );
            if let Ok(rows) = fenced {
                if !rows.is_empty() {
                    let key = Unit::new(&tenant, shard).unwrap().to_string();
                    if tx.execute(&self.insert, &[&key, &token, &self.id]).is_ok()
                        && tx.commit().is_ok()
                    {
                        writes.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// Stops, as a crash would: its row expires at its TTL.
    fn leave(self) {}
}
