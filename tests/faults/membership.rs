//! Partitions and crashes during rebalancing: no unit worked by two processes.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::registry::{Registry, Worker};
use crate::common::{client, count, db, ledger, wait_for, Running, Tables};
use pgtenure::membership::{Config, Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::DbBuilder;

use super::child::Child;
use super::{Write, CHILD_ENV};

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
                .build_lazy()
                .unwrap();
            let worker = Arc::new(Worker {
                registry: registry.clone(),
                id,
                drain_ms: 0,
            });
            Arc::new(
                Leaser::new(&via, worker, config.clone())
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
    // Real time is the subject: the partition goes on another TTL after the takeover.
    thread::sleep(ttl);
    proxies[0].heal();
    wait_for(
        "process 0 to get its share back",
        Duration::from_secs(10),
        || ((0..3).all(|i| owned(i) == 40)).then_some(()),
    );

    // Cut everyone's connections: nobody loses anything it can renew in time.
    cut_and_wait_for_heartbeats(&proxies, &leasers);
    assert_eq!(
        (0..3).map(owned).collect::<Vec<_>>(),
        vec![40; 3],
        "a process lost units to a cut it renewed through"
    );

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

/// Cuts every proxy's connections and waits (bounded) until every process heartbeats again (its
/// local deadline moves on).
fn cut_and_wait_for_heartbeats(proxies: &[Proxy], leasers: &[Arc<Leaser>]) {
    let before: Vec<Option<Instant>> = leasers.iter().map(|l| l.live_until()).collect();
    for proxy in proxies {
        proxy.cut();
    }
    wait_for(
        "every process to heartbeat again after the cut",
        Duration::from_secs(10),
        || {
            let renewed = leasers
                .iter()
                .zip(&before)
                .all(|(l, before)| l.live_until() > *before);
            renewed.then_some(())
        },
    );
}

/// A unit's fenced write: the ledger row is stamped with the unit's token, written only if the fence
/// passed.
fn fenced_unit_write(leaser: &Leaser, ledger: &str, unit: &Unit) -> Write {
    let Ok(mut conn) = db().connection() else {
        return Write::Failed;
    };
    let Ok(mut tx) = conn.transaction() else {
        return Write::Failed;
    };
    let token = leaser.token(unit).unwrap_or(-1);
    match leaser.fence(&mut tx, unit) {
        Ok(true) => {}
        Ok(false) => return Write::Refused,
        Err(_) => return Write::Failed,
    }
    let insert = format!("INSERT INTO {ledger} (key, token, owner) VALUES ($1, $2, $3)");
    let key = unit.to_string();
    if tx
        .execute(&insert, &[&key, &token, &leaser.process_id()])
        .is_err()
        || tx.commit().is_err()
    {
        return Write::Failed;
    }
    Write::Done
}

/// Prints every loss, so the parent sees the paused child learn it.
struct Printer;

impl Reconciler for Printer {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, units: &[Unit], reason: UnitLoss) {
        println!("LOST {} {reason:?}", units.len());
    }
}

fn member_config() -> Config {
    let mut config = Config::default();
    config.ttl = Duration::from_millis(600);
    config.heartbeat_interval = Duration::from_millis(150);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = Duration::from_secs(60);
    config
}

/// The child side of the pause test: own the one unit and write through its fence, until told to
/// stop by the clock.
fn paused_member_child(procs: &str, units: &str, ledger: &str) {
    let leaser = Leaser::new(&db(), Arc::new(Printer), member_config())
        .unwrap()
        .with_tables(procs, units)
        .unwrap();
    let unit = Unit::new("t", 0).unwrap();
    let running = leaser.spawn().unwrap();
    let token = wait_for("the child to own its unit", Duration::from_secs(10), || {
        running.leaser().token(&unit)
    });
    println!("TOKEN {token}");
    let started = Instant::now();
    let mut refused_after_loss = false;
    while started.elapsed() < Duration::from_secs(30) && !refused_after_loss {
        let write = fenced_unit_write(running.leaser(), ledger, &unit);
        println!("WRITE {write:?}");
        refused_after_loss =
            write == Write::Refused && running.leaser().token(&unit) != Some(token);
        // Real time is the subject: a worker's write every 40 ms, across the pause.
        thread::sleep(Duration::from_millis(40));
    }
    // Not `stop`: the unit is the parent's now, and the release must not matter.
    drop(running);
    println!("DONE");
}

/// A member process paused past its TTL (SIGSTOP) while its unit moves to another process: every
/// fenced write it attempts once resumed is refused, and it learns the loss.
#[test]
fn a_paused_member_process_is_refused_on_resume_and_learns_its_loss() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "paused-member") {
        let var = |name: &str| std::env::var(name).unwrap();
        return paused_member_child(
            &var("PGTENURE_CHILD_PROCS"),
            &var("PGTENURE_CHILD_UNITS"),
            &var("PGTENURE_CHILD_LEDGER"),
        );
    }
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_t).unwrap();
    units.create_tables().unwrap();
    let unit = Unit::new("t", 0).unwrap();
    units.add(std::slice::from_ref(&unit)).unwrap();
    let ledger = ledger::create(&mut tables);
    let child = Child::spawn(
        "membership::a_paused_member_process_is_refused_on_resume_and_learns_its_loss",
        "paused-member",
        &[
            ("PGTENURE_CHILD_PROCS", &procs),
            ("PGTENURE_CHILD_UNITS", &units_t),
            ("PGTENURE_CHILD_LEDGER", &ledger),
        ],
    );
    let token = child.token();
    wait_for("the child's first writes", Duration::from_secs(5), || {
        (count(&mut client(), &ledger) >= 2).then_some(())
    });
    child.signal("-STOP");
    let paused_writes = count(&mut client(), &ledger);
    // If the pause caught the child inside a fenced transaction, its lock on the unit's row makes
    // every claimer skip the unit until it resumes and commits: that write was fenced before the
    // pause, so that is safe, and the takeover comes after.
    let (p, u, l) = (procs.clone(), units_t.clone(), ledger.clone());
    let takeover = thread::spawn(move || {
        let other = Leaser::new(&db(), Arc::new(Printer), member_config())
            .unwrap()
            .with_tables(&p, &u)
            .unwrap();
        let unit = Unit::new("t", 0).unwrap();
        let taken = wait_for("a takeover", Duration::from_secs(20), || {
            other.heartbeat().unwrap();
            other.tick().unwrap();
            other.token(&unit)
        });
        let write = fenced_unit_write(&other, &l, &unit);
        (taken, write, other)
    });
    let waited = Instant::now();
    while !takeover.is_finished() && waited.elapsed() < Duration::from_secs(3) {
        // Real time is the subject: the takeover must not finish in the 3 s the child stays
        // paused mid-transaction (polled every 10 ms).
        thread::sleep(Duration::from_millis(10));
    }
    let mid_transaction = !takeover.is_finished();
    child.signal("-CONT");
    let (taken, write, other) = takeover.join().unwrap();
    assert!(
        taken > token,
        "the takeover's token {taken} follows {token}"
    );
    assert_eq!(write, Write::Done);

    // The child keeps its process row alive: keep the new owner's too.
    let after = child.finish(|_| other.heartbeat().unwrap());
    let shown: Vec<&String> = after.iter().take(12).collect();
    println!("member child after resume (paused mid-transaction: {mid_transaction}): {shown:?}");
    assert!(
        after
            .iter()
            .any(|l| l.contains("LOST 1 Expired") || l.contains("LOST 1 Taken")),
        "{shown:?}"
    );
    assert!(
        after.iter().any(|l| l.ends_with("WRITE Refused")),
        "{shown:?}"
    );
    // Only a write already fenced when the pause came may commit after the resume.
    let rows = ledger::rows(&ledger);
    let child_rows = rows.iter().filter(|(_, t, _)| *t == token).count() as i64;
    let allowed = paused_writes + i64::from(mid_transaction);
    assert!(
        child_rows <= allowed,
        "the child wrote {child_rows} rows, {allowed} allowed"
    );
    ledger::assert_ordered(&ledger);
}
