//! Fault injection: a blackholed network, a paused holder process, a restarted database, a
//! SERIALIZABLE default, partitions and crashes during rebalancing, every bad input, and the round
//! trips of every operation. Each asserts that nothing was held twice and no stale holder wrote.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::proxy::{database_addr, Proxy};
use common::registry::{Registry, Worker};
use common::{client, count, db, lease_table, ledger, wait_for, Role, Running, Tables};
use pgtenure::membership::{Config, Hooks, Leaser, Reconciler, Unit, Units};
use pgtenure::testing::TempPostgres;
use pgtenure::{
    Db, DbBuilder, Elector, ErrorKind, FireClaims, KeyRenewal, Leases, LossReason, TickClaims,
};

const CHILD_ENV: &str = "PGTENURE_FAULT_CHILD";

/// What a fenced write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Done,
    /// The fence refused: a newer tenure exists, or this one lapsed.
    Refused,
    /// The database could not be reached (a fault): nothing known written.
    Failed,
}

/// One protected write: fence, then insert into the ledger, in one transaction of `db`'s.
fn fenced_write(db: &Db, leases: &Leases, ledger: &str, key: &str, token: i64) -> Write {
    let Ok(mut conn) = db.pool().get() else {
        return Write::Failed;
    };
    let Ok(mut tx) = conn.transaction() else {
        return Write::Failed;
    };
    match leases.fence(&mut tx, key, token) {
        Ok(true) => {}
        Ok(false) => return Write::Refused,
        Err(_) => return Write::Failed,
    }
    let insert = format!("INSERT INTO {ledger} (token, owner) VALUES ($1, $2)");
    if tx.execute(&insert, &[&token, &leases.owner()]).is_err() || tx.commit().is_err() {
        return Write::Failed;
    }
    Write::Done
}

#[test]
fn every_operation_is_one_round_trip() {
    let mut tables = Tables::new();
    let (tick_t, fire_t, lease_t, leader_t) = (
        tables.name("tick"),
        tables.name("fire"),
        tables.name("lease"),
        tables.name("leader"),
    );
    let (procs_t, units_t) = (tables.name("procs"), tables.name("units"));
    TickClaims::new(&db())
        .with_table(&tick_t)
        .unwrap()
        .create_table()
        .unwrap();
    FireClaims::new(&db())
        .with_table(&fire_t)
        .unwrap()
        .create_table()
        .unwrap();
    Leases::new(&db())
        .with_table(&lease_t)
        .unwrap()
        .create_table()
        .unwrap();
    Elector::new(&db())
        .with_table(&leader_t)
        .unwrap()
        .create_table()
        .unwrap();
    Units::new(&db())
        .with_tables(&procs_t, &units_t)
        .unwrap()
        .create_tables()
        .unwrap();

    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config())
        .max_size(1)
        .unwrap()
        .build()
        .unwrap();
    let ticks = TickClaims::new(&via).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&via).with_table(&fire_t).unwrap();
    let leases = Leases::new(&via).with_table(&lease_t).unwrap();
    let elector = Elector::new(&via).with_table(&leader_t).unwrap();
    let units = Units::new(&via).with_tables(&procs_t, &units_t).unwrap();
    let leaser = Leaser::new(&via, Arc::new(Quiet), Config::default(), Hooks::default())
        .unwrap()
        .with_tables(&procs_t, &units_t)
        .unwrap();

    // Each operation twice, on other keys the second time: the first use of a statement on a
    // connection also prepares it (one more round trip); from then on, one round trip each.
    let mut passes: Vec<Vec<(&str, u64)>> = Vec::new();
    for pass in 0..2_i32 {
        let mut measured: Vec<(&str, u64)> = Vec::new();
        let mut measure = |name: &'static str, f: &mut dyn FnMut()| {
            let before = proxy.round_trips();
            f();
            measured.push((name, proxy.round_trips() - before));
        };
        let key = |name: &str| format!("{name}{pass}");
        let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut won = None;
        measure("tick claim (won)", &mut || {
            won = ticks
                .claim(&key("job"), tick, Duration::from_secs(60))
                .unwrap()
        });
        measure("tick claim (refused)", &mut || {
            assert!(ticks
                .claim(&key("job"), tick, Duration::from_secs(60))
                .unwrap()
                .is_none())
        });
        let mut claim = won.take();
        measure("tick release", &mut || {
            claim.take().unwrap().release().unwrap()
        });
        measure("fire claim (won)", &mut || {
            assert!(fires.claim(&key("f@")).unwrap())
        });
        measure("fire claim (refused)", &mut || {
            assert!(!fires.claim(&key("f@")).unwrap())
        });
        measure("fire purge", &mut || {
            fires.purge(Duration::ZERO).unwrap();
        });
        measure("lease try_acquire", &mut || {
            assert!(leases
                .try_acquire(&key("a"), Duration::from_secs(60))
                .unwrap()
                .is_some())
        });
        measure("lease try_acquire (refused)", &mut || {
            let other = Leases::new(&via).with_table(&lease_t).unwrap();
            assert!(other
                .try_acquire(&key("a"), Duration::from_secs(60))
                .unwrap()
                .is_none());
        });
        measure("lease renew (batch of 3)", &mut || {
            leases
                .renew(
                    &[&*key("a"), &*key("b"), &*key("c")],
                    Duration::from_secs(60),
                )
                .unwrap();
        });
        measure("lease supersede", &mut || {
            assert!(leases.supersede(&key("a")).unwrap())
        });
        measure("lease release", &mut || {
            assert!(leases.release(&key("a")).unwrap())
        });
        let mut lease = None;
        measure("managed lease acquire", &mut || {
            lease = leases.acquire(&key("m"), Duration::from_secs(60)).unwrap()
        });
        let token = lease.as_ref().unwrap().token();
        let mut conn = via.pool().get().unwrap();
        let mut tx = conn.transaction().unwrap();
        measure("lease fence (in a transaction)", &mut || {
            assert!(leases.fence(&mut tx, &key("m"), token).unwrap())
        });
        tx.commit().unwrap();
        drop(conn);
        measure("managed lease release", &mut || {
            lease.take().unwrap().release().unwrap()
        });
        measure("elector is_leader", &mut || {
            assert!(elector.is_leader().unwrap())
        });
        measure("elector leader", &mut || {
            assert!(elector.leader().unwrap().is_some())
        });
        measure("elector resign", &mut || elector.resign().unwrap());
        let shard = |i: i32| Unit::new("t", 10 * pass + i).unwrap();
        measure("units add (batch of 3)", &mut || {
            units.add(&[shard(1), shard(2), shard(3)]).unwrap();
        });
        measure("units set_weight", &mut || {
            assert!(units.set_weight(&shard(3), 2).unwrap())
        });
        measure("membership heartbeat", &mut || leaser.heartbeat().unwrap());
        measure("membership sweep", &mut || {
            leaser.sweep().unwrap();
        });
        measure("membership release", &mut || {
            leaser.release().unwrap();
        });
        measure("membership delete_process", &mut || {
            leaser.delete_process().unwrap()
        });
        passes.push(measured);
    }
    for (first, steady) in passes[0].iter().zip(&passes[1]) {
        println!(
            "{} round trip(s) at first use, then {}: {}",
            first.1, steady.1, first.0
        );
    }
    for (name, trips) in &passes[0] {
        // The fence runs unprepared inside the caller's transaction; the managed lease's acquire
        // and release ran their statements on this connection before (try_acquire, release).
        assert!(
            *trips <= 2,
            "{name} took {trips} round trips at first use: PREPARE and EXECUTE at most"
        );
    }
    for (name, trips) in &passes[1] {
        assert_eq!(*trips, 1, "{name} took {trips} round trips");
    }
    // Every statement was prepared once on this one connection.
    let prepares = passes[0].iter().filter(|(_, trips)| *trips == 2).count();
    assert!(prepares >= 15, "only {prepares} statements were prepared");
    // A tick is several statements: owned, stats, and one per claim batch (each prepared at its
    // first use).
    leaser.heartbeat().unwrap();
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 6);
    assert_eq!(
        proxy.round_trips() - before,
        6,
        "stats + owned + one claim batch, each prepared first"
    );
    units
        .add(
            &(100..103)
                .map(|s| Unit::new("t", s).unwrap())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 3);
    assert_eq!(
        proxy.round_trips() - before,
        2,
        "stats + one claim batch (what it owns is known since the last tick)"
    );
    // In steady state a tick is one statement, whatever the number of units owned.
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 0);
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "a steady tick reads only the stats"
    );
}

struct Quiet;

impl Reconciler for Quiet {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, _: &[Unit]) {}
}

#[test]
fn a_blackholed_holder_loses_at_its_local_deadline_and_is_refused_after_healing() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let ledger = ledger::create(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let holder_db = DbBuilder::from_config(proxy.config())
        .connection_timeout(Duration::from_secs(1))
        .unwrap()
        .build()
        .unwrap();
    let holder = Leases::new(&holder_db).with_table(&table).unwrap();
    let ttl = Duration::from_millis(600);
    let lease = holder.acquire("k", ttl).unwrap().unwrap();
    assert_eq!(
        fenced_write(&holder_db, &holder, &ledger, "k", lease.token()),
        Write::Done
    );

    proxy.blackhole();
    let held_until: SystemTime = client()
        .query_one(
            &format!("SELECT held_until FROM {table} WHERE key = 'k'"),
            &[],
        )
        .unwrap()
        .get(0);
    let deadline = lease.deadline();
    let reason = lease
        .lost()
        .recv_timeout(ttl * 3)
        .expect("loss while blackholed");
    let late = Instant::now().saturating_duration_since(deadline);
    assert_eq!(reason, LossReason::Expired);
    assert!(!lease.is_held());
    println!("blackholed holder: loss signalled {late:?} after its local deadline");
    assert!(late < Duration::from_millis(250), "{late:?}");

    // Another worker acquires once the database's expiry has passed, and writes.
    let other = Leases::new(&db()).with_table(&table).unwrap();
    let taken = wait_for("the takeover", Duration::from_secs(5), || {
        other.try_acquire("k", Duration::from_secs(30)).unwrap()
    });
    assert!(taken.token() > lease.token());
    let acquired_at: SystemTime = client()
        .query_one(
            &format!("SELECT acquired_at FROM {table} WHERE key = 'k'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        acquired_at >= held_until,
        "taken over before the database's expiry"
    );
    assert_eq!(
        fenced_write(&db(), &other, &ledger, "k", taken.token()),
        Write::Done
    );

    // Heal: the old holder's renew, fence and release are all refused; the new tenure is intact.
    proxy.heal();
    assert_eq!(
        holder.renew(&["k"], ttl).unwrap().get("k"),
        Some(KeyRenewal::Lost)
    );
    assert_eq!(
        fenced_write(&holder_db, &holder, &ledger, "k", lease.token()),
        Write::Refused
    );
    assert!(!holder.release("k").unwrap());
    assert!(!holder.release_tenure("k", lease.token()).unwrap());
    lease.release().unwrap();
    let (owner, token): (String, i64) = client()
        .query_one(
            &format!("SELECT owner, token FROM {table} WHERE key = 'k'"),
            &[],
        )
        .map(|r| (r.get(0), r.get(1)))
        .unwrap();
    assert_eq!((owner.as_str(), token), (other.owner(), taken.token()));
    assert_eq!(ledger::assert_ordered(&ledger).writes, 2);
}

/// The child side of the pause test: hold a lease and write through the fence until it is lost.
fn paused_holder_child(table: &str, ledger: &str) {
    let db = db();
    let leases = Leases::new(&db)
        .with_table(table)
        .unwrap()
        .with_owner(&format!("child-{}", std::process::id()))
        .unwrap();
    let lease = leases
        .acquire("k", Duration::from_millis(600))
        .unwrap()
        .expect("free");
    println!("TOKEN {}", lease.token());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let write = fenced_write(&db, &leases, ledger, "k", lease.token());
        println!("WRITE {write:?}");
        if let Ok(reason) = lease.lost().try_recv() {
            println!("LOST {reason:?}");
            println!(
                "WRITE {:?}",
                fenced_write(&db, &leases, ledger, "k", lease.token())
            );
            break;
        }
        thread::sleep(Duration::from_millis(40));
    }
    println!("DONE");
}

#[test]
fn a_paused_holder_process_is_refused_on_resume_and_learns_its_loss() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "paused-holder") {
        let table = std::env::var("PGTENURE_CHILD_TABLE").unwrap();
        let ledger = std::env::var("PGTENURE_CHILD_LEDGER").unwrap();
        return paused_holder_child(&table, &ledger);
    }
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let ledger = ledger::create(&mut tables);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_paused_holder_process_is_refused_on_resume_and_learns_its_loss",
            "--nocapture",
        ])
        .env(CHILD_ENV, "paused-holder")
        .env("PGTENURE_CHILD_TABLE", &table)
        .env("PGTENURE_CHILD_LEDGER", &ledger)
        .env("DATABASE_URL", common::url())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let (lines_tx, lines) = pgtenure::crossbeam_channel::unbounded::<String>();
    let out = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let token: i64 = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the child reports its token");
        if let Some((_, t)) = line.split_once("TOKEN ") {
            break t.trim().parse().unwrap();
        }
    };
    // Let it write a few times, then pause it past its TTL.
    wait_for("the child's first writes", Duration::from_secs(5), || {
        (count(&mut client(), &ledger) >= 2).then_some(())
    });
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let paused_writes = count(&mut client(), &ledger);
    // If the pause caught the child inside a fenced transaction, its row lock makes every takeover
    // wait until it resumes and commits: the write was fenced before the pause, so that is safe.
    let (t, l) = (table.clone(), ledger.clone());
    let takeover = thread::spawn(move || {
        let other = Leases::new(&db()).with_table(&t).unwrap();
        let taken = wait_for("a takeover", Duration::from_secs(20), || {
            other.try_acquire("k", Duration::from_secs(30)).unwrap()
        });
        let write = fenced_write(&db(), &other, &l, "k", taken.token());
        (taken.token(), write)
    });
    let waited = Instant::now();
    while !takeover.is_finished() && waited.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(10));
    }
    let mid_transaction = !takeover.is_finished();
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let (taken, write) = takeover.join().unwrap();
    assert!(taken > token);
    assert_eq!(write, Write::Done);

    let mut after: Vec<String> = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the child finishes");
        if line.ends_with("DONE") {
            break;
        }
        after.push(line);
    }
    child.wait().unwrap();
    reader.join().unwrap();
    println!("child after resume (paused mid-transaction: {mid_transaction}): {after:?}");
    assert!(
        after.iter().any(|l| l.ends_with("LOST Expired")),
        "{after:?}"
    );
    // Every write the child attempted after its tenure ended was refused: the ledger proves it. Only
    // a write already fenced when the pause came may commit after the resume.
    let rows = ledger::rows(&ledger);
    let child_rows = rows.iter().filter(|(_, t, _)| *t == token).count() as i64;
    let allowed = paused_writes + i64::from(mid_transaction);
    assert!(
        child_rows <= allowed,
        "the child wrote {child_rows} rows, {allowed} allowed"
    );
    assert!(
        after.iter().any(|l| l.ends_with("WRITE Refused")),
        "{after:?}"
    );
    ledger::assert_ordered(&ledger);
}

#[test]
fn a_database_restart_during_renewals_loses_no_lease_that_can_still_be_renewed() {
    // A server of its own: restarting the shared one would disturb the other tests.
    let pg = TempPostgres::start().unwrap();
    let db = Db::connect(pg.url()).unwrap();
    let leases = Leases::new(&db);
    leases.create_table().unwrap();
    let held: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| leases.acquire(k, Duration::from_secs(3)).unwrap().unwrap())
        .collect();
    let tokens: Vec<i64> = held.iter().map(|l| l.token()).collect();
    // A contender keeps trying throughout; it must never get a key.
    let contender_db = Db::builder(pg.url()).unwrap().build_lazy();
    let contender = Leases::new(&contender_db);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (c, s) = (contender.clone(), stop.clone());
    let contending = thread::spawn(move || {
        let (mut tries, mut errors) = (0, 0);
        while !s.load(Ordering::SeqCst) {
            for key in ["a", "b", "c"] {
                tries += 1;
                match c.try_acquire(key, Duration::from_secs(1)) {
                    Ok(None) => {}
                    Ok(Some(grant)) => panic!("{key} granted twice: token {}", grant.token()),
                    Err(_) => errors += 1,
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        (tries, errors)
    });
    thread::sleep(Duration::from_millis(500));
    let restarted = Instant::now();
    pg.restart().unwrap();
    let took = restarted.elapsed();
    // Two renewal intervals after the restart, every lease is still held, by the same tenure.
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let (tries, errors) = contending.join().unwrap();
    println!(
        "restart took {took:?}; the contender tried {tries} times ({errors} errors), never granted"
    );
    for lease in &held {
        assert!(lease.is_held(), "{} lost: {:?}", lease.key(), lease.loss());
        assert!(lease.lost().try_recv().is_err());
    }
    let mut c = pgtenure::postgres::Client::connect(pg.url(), pgtenure::postgres::NoTls).unwrap();
    let rows: Vec<(String, i64, bool)> = c
        .query(
            "SELECT key, token, held_until > now() FROM pgtenure_leases ORDER BY key",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expected: Vec<(String, i64, bool)> = ["a", "b", "c"]
        .iter()
        .zip(&tokens)
        .map(|(k, t)| ((*k).to_owned(), *t, true))
        .collect();
    assert_eq!(rows, expected);
    drop(held);
}

#[test]
fn a_serializable_default_makes_contended_acquires_fail_cleanly_never_twice() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let role = Role::new(&mut tables, "serializable");
    client()
        .batch_execute(&format!(
            "GRANT ALL ON {table} TO {0}; GRANT USAGE, UPDATE ON SEQUENCE {table}_token_seq TO {0}",
            role.name
        ))
        .unwrap();
    let strict = DbBuilder::from_config(role.config("strict"))
        .read_committed(false)
        .max_size(8)
        .unwrap()
        .build()
        .unwrap();
    let isolation: String = strict
        .pool()
        .get()
        .unwrap()
        .query_one("SHOW transaction_isolation", &[])
        .unwrap()
        .get(0);
    assert_eq!(isolation, "serializable");
    let (mut granted, mut refused, mut serialization) = (0, 0, 0);
    for round in 0..20 {
        // The key lapses, then eight owners race for it.
        client()
            .execute(
                &format!("UPDATE {table} SET held_until = now() WHERE key = 'k'"),
                &[],
            )
            .unwrap();
        let strict = strict.clone();
        let t = table.clone();
        let outcomes = common::race(8, move |i| {
            let leases = Leases::new(&strict)
                .with_table(&t)
                .unwrap()
                .with_owner(&format!("round{round}-owner{i}"))
                .unwrap();
            leases
                .try_acquire("k", Duration::from_secs(30))
                .map(|g| g.map(|g| g.token()))
        });
        let winners = outcomes.iter().filter(|o| matches!(o, Ok(Some(_)))).count();
        assert!(winners <= 1, "round {round}: {winners} holders");
        for outcome in &outcomes {
            match outcome {
                Ok(Some(_)) => granted += 1,
                Ok(None) => refused += 1,
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Serialization, "{e}");
                    serialization += 1;
                }
            }
        }
    }
    println!("SERIALIZABLE: {granted} granted, {refused} refused, {serialization} serialization failures");
    assert!(granted >= 1);
}

#[test]
fn partitions_and_crashes_during_rebalancing_never_let_two_processes_work_a_unit() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_t).unwrap();
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..120).map(|i| Unit::new("t", i).unwrap()).collect();
    units.add(&all).unwrap();
    let registry = Arc::new(Registry::default());
    let ttl = Duration::from_millis(800);
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = Duration::from_millis(200);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = ttl * 4;
    let proxies: Vec<Proxy> = (0..3)
        .map(|_| Proxy::start(0, database_addr()).unwrap())
        .collect();
    let leasers: Vec<Arc<Leaser>> = proxies
        .iter()
        .enumerate()
        .map(|(id, proxy)| {
            let via = DbBuilder::from_config(proxy.config())
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .build_lazy();
            let worker = Arc::new(Worker {
                registry: registry.clone(),
                id,
                drain_ms: 0,
            });
            Arc::new(
                Leaser::new(&via, worker, config.clone(), Hooks::default())
                    .unwrap()
                    .with_tables(&procs, &units_t)
                    .unwrap(),
            )
        })
        .collect();
    let mut running: Vec<Running> = leasers.iter().map(|l| Running::start(l.clone())).collect();
    let owned = |i: usize| leasers[i].owned().len();
    wait_for("40 units each", Duration::from_secs(10), || {
        ((0..3).all(|i| owned(i) == 40)).then_some(())
    });

    // Partition process 0 for three TTLs: it must stop working before the others take over.
    proxies[0].blackhole();
    wait_for(
        "the others to take process 0's units",
        Duration::from_secs(10),
        || (owned(1) + owned(2) == 120).then_some(()),
    );
    assert!(
        leasers[0].owned().is_empty(),
        "the partitioned process still believes it owns units"
    );
    thread::sleep(ttl);
    proxies[0].heal();
    wait_for(
        "process 0 to get its share back",
        Duration::from_secs(10),
        || ((0..3).all(|i| owned(i) == 40)).then_some(()),
    );

    // Cut everyone's connections: nobody loses anything it can renew in time.
    for proxy in &proxies {
        proxy.cut();
    }
    thread::sleep(ttl / 2);

    // Crash process 2 (it stops without releasing): its units move after its TTL.
    let crashed_at = Instant::now();
    // A crashed process works on nothing any more, at once; then its loop stops.
    registry.crashed(2);
    running[2].stop();
    wait_for(
        "the survivors to take process 2's units",
        Duration::from_secs(10),
        || (owned(0) + owned(1) == 120).then_some(()),
    );
    let moved_after = crashed_at.elapsed();
    println!(
        "rebalanced through a partition, a cut and a crash: {} units gained in all, crash absorbed after {moved_after:?}",
        registry.gained.load(Ordering::SeqCst)
    );
    assert!(
        moved_after >= ttl / 2,
        "the crashed process's units moved before its TTL"
    );
    for run in &mut running {
        run.stop();
    }
    assert_eq!(
        registry.violations(),
        0,
        "a unit was worked on by two processes"
    );
}

/// The bad-input matrix (README, "Security"): every case is refused with `InvalidInput` before any
/// statement, or handled as documented, and nothing is stored or changed.
#[test]
fn bad_input_matrix_is_refused_before_any_statement_and_changes_nothing() {
    let mut tables = Tables::new();
    let (tick_t, fire_t, lease_t, leader_t) = (
        tables.name("tick"),
        tables.name("fire"),
        tables.name("lease"),
        tables.name("leader"),
    );
    let (procs_t, units_t) = (tables.name("procs"), tables.name("units"));
    let ticks = TickClaims::new(&db()).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&db()).with_table(&fire_t).unwrap();
    let leases = Leases::new(&db()).with_table(&lease_t).unwrap();
    let elector = Elector::new(&db()).with_table(&leader_t).unwrap();
    let units = Units::new(&db()).with_tables(&procs_t, &units_t).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    leases.create_table().unwrap();
    elector.create_table().unwrap();
    units.create_tables().unwrap();
    let db_now: SystemTime = client().query_one("SELECT now()", &[]).unwrap().get(0);
    // The closures below borrow the handles.
    let (ticks, fires, leases, units) = (&ticks, &fires, &leases, &units);

    let long = "k".repeat(1025);
    let huge = "k".repeat(100_000);
    let bad_keys = ["", " ", "\t \n", "nul\0byte", long.as_str(), huge.as_str()];
    let year = Duration::from_secs(366 * 86_400);
    let bad_durations = [
        Duration::ZERO,
        Duration::from_micros(999),
        year * 101,
        Duration::MAX,
    ];
    let bad_tables = [
        "x; drop table y",
        "\"a\"",
        "a.b.c",
        &"t".repeat(64),
        "a'b",
        "a b",
        "1a",
        "",
        "a.",
    ];

    type Case<'a> = (String, Box<dyn Fn() -> pgtenure::Result<()> + 'a>);
    let mut cases: Vec<Case<'_>> = Vec::new();
    let minute = Duration::from_secs(60);
    for key in bad_keys {
        let shown = format!("{:?}", &key[..key.len().min(12)]);
        let tick = db_now;
        cases.push((
            format!("tick claim job {shown}"),
            Box::new(move || ticks.claim(key, tick, minute).map(|_| ())),
        ));
        cases.push((
            format!("fire claim {shown}"),
            Box::new(move || fires.claim(key).map(|_| ())),
        ));
        cases.push((
            format!("lease try_acquire {shown}"),
            Box::new(move || leases.try_acquire(key, minute).map(|_| ())),
        ));
        cases.push((
            format!("lease acquire {shown}"),
            Box::new(move || leases.acquire(key, minute).map(|_| ())),
        ));
        cases.push((
            format!("lease renew batch with {shown}"),
            Box::new(move || leases.renew(&["ok", key], minute).map(|_| ())),
        ));
        cases.push((
            format!("lease release {shown}"),
            Box::new(move || leases.release(key).map(|_| ())),
        ));
        cases.push((
            format!("lease supersede {shown}"),
            Box::new(move || leases.supersede(key).map(|_| ())),
        ));
        cases.push((
            format!("elector name {shown}"),
            Box::new(move || Elector::new(&db()).with_name(key).map(|_| ())),
        ));
        cases.push((
            format!("elector holder {shown}"),
            Box::new(move || Elector::new(&db()).with_holder(key).map(|_| ())),
        ));
        cases.push((
            format!("lease owner {shown}"),
            Box::new(move || Leases::new(&db()).with_owner(key).map(|_| ())),
        ));
        cases.push((
            format!("unit tenant {shown}"),
            Box::new(move || Unit::new(key, 1).map(|_| ())),
        ));
        let unit = Unit {
            tenant: key.to_owned(),
            shard: 1,
        };
        let u2 = unit.clone();
        cases.push((
            format!("units add {shown}"),
            Box::new(move || units.add(std::slice::from_ref(&u2)).map(|_| ())),
        ));
        cases.push((
            format!("units set_weight {shown}"),
            Box::new(move || units.set_weight(&unit, 1).map(|_| ())),
        ));
    }
    for d in bad_durations {
        cases.push((
            format!("tick busy_for {d:?}"),
            Box::new(move || ticks.claim("job", db_now, d).map(|_| ())),
        ));
        cases.push((
            format!("fire ttl {d:?}"),
            Box::new(move || FireClaims::new(&db()).with_ttl(d).map(|_| ())),
        ));
        cases.push((
            format!("lease ttl {d:?}"),
            Box::new(move || leases.try_acquire("k", d).map(|_| ())),
        ));
        cases.push((
            format!("elector ttl {d:?}"),
            Box::new(move || Elector::new(&db()).with_ttl(d).map(|_| ())),
        ));
    }
    cases.push((
        "managed lease ttl 29ms".into(),
        Box::new(|| leases.acquire("k", Duration::from_millis(29)).map(|_| ())),
    ));
    cases.push((
        "purge older than 101 years".into(),
        Box::new(|| fires.purge(year * 101).map(|_| ())),
    ));
    cases.push((
        "negative unit weight".into(),
        Box::new(|| {
            units
                .set_weight(&Unit::new("t", 1).unwrap(), -1)
                .map(|_| ())
        }),
    ));
    for ahead in [Duration::from_secs(120), year * 50] {
        cases.push((
            format!("tick {ahead:?} ahead of the database clock"),
            Box::new(move || ticks.claim("job", db_now + ahead, minute).map(|_| ())),
        ));
    }
    for far in [
        SystemTime::UNIX_EPOCH - Duration::from_secs(1),
        SystemTime::UNIX_EPOCH + year * 9000,
    ] {
        cases.push((
            format!("tick {far:?}"),
            Box::new(move || ticks.claim("job", far, minute).map(|_| ())),
        ));
    }
    for table in bad_tables {
        cases.push((
            format!("tick table {table:?}"),
            Box::new(move || TickClaims::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("fire table {table:?}"),
            Box::new(move || FireClaims::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("lease table {table:?}"),
            Box::new(move || Leases::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("leader table {table:?}"),
            Box::new(move || Elector::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("units tables {table:?}"),
            Box::new(move || Units::new(&db()).with_tables("p", table).map(|_| ())),
        ));
    }
    cases.push((
        "database URL".into(),
        Box::new(|| Db::connect("postgres://[::1").map(|_| ())),
    ));
    let mut bad_config = Config::default();
    bad_config.heartbeat_interval = bad_config.ttl;
    cases.push((
        "membership heartbeat not below the TTL".into(),
        Box::new(move || {
            Leaser::new(&db(), Arc::new(Quiet), bad_config.clone(), Hooks::default()).map(|_| ())
        }),
    ));

    let mut failures = Vec::new();
    for (name, case) in &cases {
        match case() {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {}
            other => failures.push(format!("{name}: {:?}", other.map_err(|e| e.kind()))),
        }
    }
    assert!(
        failures.is_empty(),
        "not refused as invalid input:\n{}",
        failures.join("\n")
    );
    println!("{} bad inputs refused", cases.len());
    let mut c = client();
    for table in [&tick_t, &fire_t, &lease_t, &leader_t, &units_t, &procs_t] {
        assert_eq!(count(&mut c, table), 0, "{table} changed");
    }
    // Handled as documented: SQL-looking keys are data, stored verbatim; a tick far behind the clock
    // is data too (only the order of ticks matters).
    let sqlish = "'); DROP TABLE pg_class; --";
    assert!(ticks
        .claim(
            sqlish,
            SystemTime::UNIX_EPOCH + Duration::from_secs(86_400),
            minute
        )
        .unwrap()
        .is_some());
    assert!(fires.claim(sqlish).unwrap());
    assert!(leases.try_acquire(sqlish, minute).unwrap().is_some());
    let stored: String = c
        .query_one(&format!("SELECT key FROM {lease_t}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, sqlish);
}
