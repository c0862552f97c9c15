//! Handover by notification (`DbBuilder::handover_notifications`): a release or a resignation wakes
//! the waiters of that key or fleet at once instead of at their next poll; without the listener
//! (a connection not proven direct, a lost connection) they poll as before.
//!
//! Each test waits with a retry period far longer than its bound (30 s against 5 s): a test passes
//! only by the wake-up. They run one at a time: one counts the process's listener threads.

mod common;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use common::proxy::{database_addr, Proxy};
use common::{client, url, wait_for, Tables};
use pgtenure::elector::Elector;
use pgtenure::leases::Leases;
use pgtenure::{Db, DbBuilder};

/// Far longer than any bound below: a waiter that waits for it fails its test.
const LONG_RETRY: Duration = Duration::from_secs(30);
/// The bound on a wake-up's effect (a notification takes a few ms).
const AT_ONCE: Duration = Duration::from_secs(2);

/// One test at a time (one of them counts the process's listener threads).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn builder(url: &str, app: &str) -> DbBuilder {
    Db::builder(url)
        .and_then(|b| b.max_size(4))
        .and_then(|b| b.application_name(app))
        .unwrap()
}

/// A `Db` with handover notifications on, named `app` (its listener: `app (listener)`).
fn notifying(app: &str) -> Db {
    let _ = env_logger::builder().is_test(true).try_init();
    builder(&url(), app)
        .handover_notifications(true)
        .build()
        .unwrap()
}

/// The listener's backend of the `Db` named `app`, if connected.
fn listener_pid(app: &str) -> Option<i32> {
    client()
        .query_opt(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&format!("{app} (listener)")],
        )
        .unwrap()
        .map(|r| r.get(0))
}

/// How many threads of this process are listeners.
fn listener_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "pgtenure-listen")
        .count()
}

fn app(what: &str) -> String {
    format!("handover-{what}-{}", std::process::id())
}

#[test]
fn a_release_wakes_a_waiting_acquire_at_once() {
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let (holder_db, waiter_db) = (notifying(&app("holder")), notifying(&app("waiter")));
    let holder = Leases::new(&holder_db).with_table(&table).unwrap();
    let waiter = Leases::new(&waiter_db)
        .with_table(&table)
        .unwrap()
        .with_owner("waiter")
        .unwrap()
        .with_retry_period(LONG_RETRY)
        .unwrap();
    let held = holder
        .acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let asked = Instant::now();
            let lease = waiter
                .acquire_waiting("k", Duration::from_secs(60), Duration::from_secs(5))
                .unwrap();
            (lease, asked.elapsed())
        })
    };
    wait_for("the waiter's listener", Duration::from_secs(5), || {
        waiter_db.handover_listening().then_some(())
    });
    // The waiter polled once more when its listener began to listen: it is now in its long wait.
    let token = held.token();
    let released = Instant::now();
    held.release().unwrap();
    let (lease, _) = waiting.join().unwrap();
    let handed_over = released.elapsed();
    let lease = lease.expect("the waiting acquire was not granted within its 5 s wait");
    assert!(
        handed_over < AT_ONCE,
        "granted {handed_over:?} after the release"
    );
    assert!(lease.token() > token, "{} after {token}", lease.token());
    assert_eq!(waiter.holder("k").unwrap().unwrap().owner, "waiter");
    lease.release().unwrap();
}

/// An operator's force release (`pgtenure lease release KEY --force`) wakes the key's waiters too.
#[test]
fn a_force_release_wakes_the_waiters() {
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let db = notifying(&app("forced"));
    let holder = Leases::new(&db).with_table(&table).unwrap();
    let operator = Leases::new(&db).with_table(&table).unwrap();
    let held = holder
        .acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let freed = operator.watch_released("k").unwrap();
    wait_for("the listener", Duration::from_secs(5), || {
        db.handover_listening().then_some(())
    });
    // Drained: the wake-up of the listener's first LISTEN.
    let _ = freed.receiver().recv_timeout(AT_ONCE);
    assert!(operator.force_release("k").unwrap());
    freed
        .receiver()
        .recv_timeout(AT_ONCE)
        .expect("no wake-up for the force release");
    assert!(!operator.holder("k").unwrap().unwrap().live);
    drop(held);
}

#[test]
fn a_resignation_hands_the_leadership_over_at_once() {
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::leader_table(&mut tables);
    let (first_db, second_db) = (notifying(&app("first")), notifying(&app("second")));
    let elector = |db: &Db, holder: &str| {
        Elector::new(db)
            .with_table(&table)
            .and_then(|e| e.with_holder(holder))
            .and_then(|e| e.with_ttl(Duration::from_secs(60)))
            .and_then(|e| e.with_retry_period(LONG_RETRY))
            .unwrap()
    };
    let first = elector(&first_db, "first").campaign().unwrap();
    assert!(first.is_leading());
    let second = elector(&second_db, "second").campaign().unwrap();
    assert!(!second.is_leading());
    wait_for("the second's listener", Duration::from_secs(5), || {
        second_db.handover_listening().then_some(())
    });
    let term = first.term().unwrap();
    let stopped = Instant::now();
    first.stop().unwrap();
    let elected = wait_for("the second elected", Duration::from_secs(5), || {
        second.term()
    });
    let handed_over = stopped.elapsed();
    assert!(
        handed_over < AT_ONCE,
        "elected {handed_over:?} after the stop"
    );
    assert!(elected > term, "term {elected} after {term}");
    assert_eq!(second.elector().leader().unwrap().unwrap().holder, "second");
    second.stop().unwrap();
}

#[test]
fn a_lost_listener_polls_meanwhile_and_reconnects() {
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let name = app("lost");
    let db = notifying(&name);
    let leases = Leases::new(&db).with_table(&table).unwrap();
    let freed = leases.watch_released("k").unwrap();
    let pid = wait_for("the listener", Duration::from_secs(5), || {
        listener_pid(&name).filter(|_| db.handover_listening())
    });
    // Drained: the wake-up of the listener's first LISTEN.
    let _ = freed.receiver().recv_timeout(AT_ONCE);
    let terminated: bool = client()
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap()
        .get(0);
    assert!(terminated);
    // A new backend, listening; its reconnection wakes the waiters (what was freed meanwhile was
    // missed).
    let again = wait_for(
        "the listener's new connection",
        Duration::from_secs(10),
        || listener_pid(&name).filter(|p| *p != pid && db.handover_listening()),
    );
    assert_ne!(again, pid);
    freed
        .receiver()
        .recv_timeout(AT_ONCE)
        .expect("no wake-up after the listener reconnected");
    // And a release wakes through the new connection.
    let other = Leases::new(&db).with_table(&table).unwrap();
    let grant = other
        .try_acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert!(grant.token() > 0);
    assert!(other.release("k").unwrap());
    freed
        .receiver()
        .recv_timeout(AT_ONCE)
        .expect("no wake-up for a release after the reconnection");
}

/// A connection not proven direct (here a TCP proxy, as a pooler would be): the listener never
/// listens, logs it once, and a waiting acquire is granted at its next poll.
#[test]
fn without_a_direct_connection_waiters_poll() {
    let _serial = serial();
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let proxy = Proxy::start(Proxy::free_port(), database_addr()).unwrap();
    let name = app("proxied");
    let db = DbBuilder::from_config(proxy.config())
        .max_size(4)
        .and_then(|b| b.application_name(&name))
        .unwrap()
        .handover_notifications(true)
        .build()
        .unwrap();
    let holder_db = notifying(&app("direct-holder"));
    let holder = Leases::new(&holder_db).with_table(&table).unwrap();
    let waiter = Leases::new(&db)
        .with_table(&table)
        .unwrap()
        .with_owner("waiter")
        .unwrap()
        .with_retry_period(Duration::from_millis(700))
        .unwrap();
    let held = holder
        .acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let threads = listener_threads();
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            waiter.acquire_waiting("k", Duration::from_secs(60), Duration::from_secs(10))
        })
    };
    // The listener connects for the waiter, is not proven direct, and ends for good.
    // (Its backend goes once the server has read the connection's end.)
    wait_for("the listener's end", Duration::from_secs(5), || {
        (listener_threads() == threads - 1 && listener_pid(&name).is_none()).then_some(())
    });
    assert!(!db.handover_listening());
    held.release().unwrap();
    let lease = waiting
        .join()
        .unwrap()
        .unwrap()
        .expect("granted by polling");
    assert_eq!(waiter.holder("k").unwrap().unwrap().token, lease.token());
    lease.release().unwrap();
}

#[test]
fn dropping_the_last_clone_joins_the_listener() {
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let name = app("dropped");
    let db = notifying(&name);
    let before = listener_threads();
    assert!(before >= 1, "no listener thread");
    let leases = Leases::new(&db).with_table(&table).unwrap();
    let freed = leases.watch_released("k").unwrap();
    wait_for("the listener", Duration::from_secs(5), || {
        listener_pid(&name).filter(|_| db.handover_listening())
    });
    drop((leases, freed));
    let clone = db.clone();
    drop(db);
    assert_eq!(listener_threads(), before, "a clone keeps it");
    let dropped = Instant::now();
    drop(clone);
    // Joined within its tick: the thread is gone when drop returns.
    assert!(dropped.elapsed() < Duration::from_secs(1));
    assert_eq!(listener_threads(), before - 1);
    wait_for(
        "the listener's backend gone",
        Duration::from_secs(5),
        || listener_pid(&name).is_none().then_some(()),
    );
}

/// A database that accepts the listener's connection and then answers nothing (a hung server, a
/// stalled proxy: the peer's kernel still acknowledges, so keepalives see nothing wrong): dropping
/// the last clone of the `Db` returns within the documented bound (the connect timeout, here 1 s,
/// and two ticks), not when the database answers again.
#[test]
fn dropping_the_db_while_its_listener_connects_to_a_hung_database_is_bounded() {
    let _serial = serial();
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let proxy = Proxy::start(Proxy::free_port(), database_addr()).unwrap();
    let mut config = proxy.config();
    config.connect_timeout(Duration::from_secs(1));
    let db = DbBuilder::from_config(config)
        .max_size(2)
        .and_then(|b| b.application_name(&app("hung")))
        .unwrap()
        .handover_notifications(true)
        .build()
        .unwrap();
    let leases = Leases::new(&db).with_table(&table).unwrap();
    proxy.blackhole();
    let threads = listener_threads();
    // The first waiter makes the listener connect: accepted, then unanswered.
    let freed = leases.watch_released("k").unwrap();
    let accepted = proxy.accepted();
    wait_for("the listener's connection", Duration::from_secs(5), || {
        (proxy.accepted() > accepted).then_some(())
    });
    let dropping = thread::spawn(move || {
        let started = Instant::now();
        drop((freed, leases, db));
        started.elapsed()
    });
    wait_for("the drop", Duration::from_secs(15), || {
        dropping.is_finished().then_some(())
    });
    let took = dropping.join().unwrap();
    assert!(took < Duration::from_secs(3), "the drop took {took:?}");
    // The thread left behind ends once the database answers.
    proxy.heal();
    wait_for("the listener's end", Duration::from_secs(10), || {
        (listener_threads() == threads - 1).then_some(())
    });
}

/// Six waiters of separate owners take one key three times each, every release handing it over
/// through a notification: never two holders at once, and all 18 tenures well within a single
/// retry period (10 s: without wake-ups, each handover would wait for a poll).
#[test]
fn waiting_acquires_racing_releases_hold_one_at_a_time_and_are_woken() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let _serial = serial();
    if common::through_pgbouncer() {
        return; // No listener behind a transaction pooler: tests/pgbouncer.rs.
    }
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let db = notifying(&app("racing"));
    let holders = std::sync::Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let leases = Leases::new(&db)
                .with_table(&table)
                .and_then(|l| l.with_retry_period(Duration::from_secs(10)))
                .unwrap();
            let holders = holders.clone();
            thread::spawn(move || {
                let mut tokens = Vec::new();
                for _ in 0..3 {
                    let lease = leases
                        .acquire_waiting("one", Duration::from_secs(5), Duration::from_secs(30))
                        .unwrap()
                        .expect("acquired within the wait");
                    assert_eq!(holders.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokens.push(lease.token());
                    holders.fetch_sub(1, Ordering::SeqCst);
                    lease.release().unwrap();
                }
                tokens
            })
        })
        .collect();
    let mut tokens: Vec<i64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "18 handovers took {took:?}");
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 18, "every tenure had a token of its own");
}
