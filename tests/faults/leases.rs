//! Lease holders under faults: a blackholed network, a paused holder process, a restarted database.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{client, count, db, lease_table, ledger, wait_for, Tables};
use pgtenure::testing::TempPostgres;
use pgtenure::{
    leases::{KeyRenewal, Lease, LeaseLoss, Leases},
    Db, DbBuilder, StatementMode,
};

use super::child::Child;
use super::{fenced_write, Write, CHILD_ENV};

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
    assert_eq!(reason, LeaseLoss::Expired);
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
            // The local loss comes first; the database may still hold the row for this tenure (a
            // renewal sent before the pause committed after it) until the takeover: write until
            // refused.
            let refusing = Instant::now();
            while refusing.elapsed() < Duration::from_secs(20) {
                let write = fenced_write(&db, &leases, ledger, "k", lease.token());
                println!("WRITE {write:?}");
                if matches!(write, Write::Refused) {
                    break;
                }
                // Real time is the subject: a holder's write every 40 ms, as its work paces it.
                thread::sleep(Duration::from_millis(40));
            }
            break;
        }
        // Real time is the subject: a holder's write every 40 ms, across the pause.
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
    let child = Child::spawn(
        "leases::a_paused_holder_process_is_refused_on_resume_and_learns_its_loss",
        "paused-holder",
        &[
            ("PGTENURE_CHILD_TABLE", &table),
            ("PGTENURE_CHILD_LEDGER", &ledger),
        ],
    );
    let token = child.token();
    // Let it write a few times, then pause it past its TTL.
    wait_for("the child's first writes", Duration::from_secs(5), || {
        (count(&mut client(), &ledger) >= 2).then_some(())
    });
    child.signal("-STOP");
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
        // Real time is the subject: the takeover must not finish in the 3 s the child stays
        // paused mid-transaction (polled every 10 ms).
        thread::sleep(Duration::from_millis(10));
    }
    let mid_transaction = !takeover.is_finished();
    child.signal("-CONT");
    let (taken, write) = takeover.join().unwrap();
    assert!(taken > token);
    assert_eq!(write, Write::Done);

    let after = child.finish(|_| {});
    println!("child after resume (paused mid-transaction: {mid_transaction}): {after:?}");
    assert!(
        after.iter().any(|l| l.ends_with("LOST Expired")),
        "{after:?}"
    );
    // Every write the child attempted after its tenure ended in the database was refused: no row of
    // its token follows the takeover's in the ledger. Writes between its local loss and the
    // takeover may land (a renewal sent before the pause can commit after it and keep the row
    // its own until then); they come before the takeover's.
    let rows = ledger::rows(&ledger);
    let taken_at = rows
        .iter()
        .position(|(_, t, _)| *t == taken)
        .expect("the takeover wrote");
    assert!(
        rows[taken_at..].iter().all(|(_, t, _)| *t != token),
        "the child wrote after the takeover: {rows:?}"
    );
    assert!(
        rows[..taken_at]
            .iter()
            .filter(|(_, t, _)| *t == token)
            .count() as i64
            >= paused_writes,
        "the child's writes before the pause are there"
    );
    assert!(
        after.iter().any(|l| l.ends_with("WRITE Refused")),
        "{after:?}"
    );
    ledger::assert_ordered(&ledger);
}

#[test]
fn a_database_restart_during_renewals_loses_no_lease_that_can_still_be_renewed() {
    // A server of its own: restarting the shared one would disturb the other tests. One restart
    // per statement mode: every way of sending statements finds its connections gone, and the
    // statements prepared on them with them.
    let pg = TempPostgres::start().unwrap();
    for mode in [
        StatementMode::Auto,
        StatementMode::Protocol,
        StatementMode::Sql,
        StatementMode::Unprepared,
    ] {
        restart_during_renewals(&pg, mode);
    }
}

fn restart_during_renewals(pg: &TempPostgres, mode: StatementMode) {
    let table = format!("restart_leases_{mode}");
    let db = Db::builder(pg.url())
        .unwrap()
        .statement_mode(mode)
        .build()
        .unwrap();
    let leases = Leases::new(&db).with_table(&table).unwrap();
    leases.create_table().unwrap();
    let held: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| leases.acquire(k, Duration::from_secs(3)).unwrap().unwrap())
        .collect();
    let tokens: Vec<i64> = held.iter().map(|l| l.token()).collect();
    // A contender keeps trying throughout; it must never get a key.
    let contender_db = Db::builder(pg.url())
        .unwrap()
        .statement_mode(mode)
        .build_lazy()
        .unwrap();
    let contender = Leases::new(&contender_db).with_table(&table).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tried = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (c, s, t) = (contender.clone(), stop.clone(), tried.clone());
    let contending = thread::spawn(move || {
        let (mut tries, mut errors) = (0, 0);
        while !s.load(Ordering::SeqCst) {
            for key in ["a", "b", "c"] {
                tries += 1;
                t.fetch_add(1, Ordering::SeqCst);
                match c.try_acquire(key, Duration::from_secs(1)) {
                    Ok(None) => {}
                    Ok(Some(grant)) => {
                        panic!("{mode}: {key} granted twice: token {}", grant.token())
                    }
                    Err(_) => errors += 1,
                }
            }
            // Real time is the subject: the contender tries every key every 20 ms.
            thread::sleep(Duration::from_millis(20));
        }
        (tries, errors)
    });
    wait_for(
        "the contender's first tries",
        Duration::from_secs(5),
        || (tried.load(Ordering::SeqCst) >= 6).then_some(()),
    );
    let restarted = Instant::now();
    pg.restart().unwrap();
    let took = restarted.elapsed();
    renewed_while_contended(&held, &tried);
    stop.store(true, Ordering::SeqCst);
    let (tries, errors) = contending.join().unwrap();
    println!(
        "{mode}: restart took {took:?}; the contender tried {tries} times ({errors} errors), never \
         granted"
    );
    for lease in &held {
        assert!(
            lease.is_held(),
            "{mode}: {} lost: {:?}",
            lease.key(),
            lease.loss()
        );
        assert!(lease.lost().try_recv().is_err());
    }
    // After the restart, both sides' statements run again (prepared afresh, in their mode).
    assert!(contender
        .try_acquire("a", Duration::from_secs(1))
        .unwrap()
        .is_none());
    let mut c = pgtenure::postgres::Client::connect(pg.url(), pgtenure::postgres::NoTls).unwrap();
    let rows: Vec<(String, i64, bool)> = c
        .query(
            &format!("SELECT key, token, held_until > now() FROM {table} ORDER BY key"),
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
    assert_eq!(rows, expected, "{mode}");
    for lease in held {
        lease.release().unwrap();
    }
}

/// Waits (bounded) until every lease in `held` renewed once more (its deadline moves on) or was
/// lost, and the contender counting its tries in `tried` tried every key twice more.
fn renewed_while_contended(held: &[Lease], tried: &std::sync::atomic::AtomicUsize) {
    let from: Vec<Instant> = held.iter().map(|l| l.deadline()).collect();
    let tried_from = tried.load(Ordering::SeqCst);
    wait_for(
        "every lease renewed again (or lost) while the contender tried",
        Duration::from_secs(10),
        || {
            let renewed = held
                .iter()
                .zip(&from)
                .all(|(l, from)| l.deadline() > *from || !l.is_held());
            (renewed && tried.load(Ordering::SeqCst) >= tried_from + 6).then_some(())
        },
    );
}
