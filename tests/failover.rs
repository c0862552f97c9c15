//! Failover to a streaming standby: the harness itself, then what leases, leadership and
//! fenced writes keep across a promotion, with a synchronous standby and with a lagging
//! asynchronous one. Every test starts replicated servers of its own (never `DATABASE_URL`'s: it
//! kills a server) and prints its trials (`--nocapture` shows them).

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{accepts, temp_dirs_of, wait_for};
use pgtenure::postgres::{self, NoTls};
use pgtenure::testing::{ReplicatedPostgres, Replication};
use pgtenure::{Db, Elector, LeaderEvent, Leases, Refusal};

const CHILD_ENV: &str = "PGTENURE_TEST_CHILD";
/// The key the holder leases, and the ledger key of the leader's writes.
const KEY: &str = "job";
const LEADER_KEY: &str = "leader";
/// The fleet the holder leads (the elector's default name).
const FLEET: &str = pgtenure::elector::DEFAULT_NAME;
/// A key and a fleet the holder wins while the standby is frozen, in tables of their own made
/// before: the standby never sees them, nor any TTL asked of those tables.
const UNSEEN: &str = "unseen";
const UNSEEN_LEASES: &str = "unseen_leases";
const UNSEEN_LEADER: &str = "unseen_leader";
/// How often the holder writes, and the contender polls.
const WRITE_EVERY: Duration = Duration::from_millis(20);
const POLL_EVERY: Duration = Duration::from_millis(100);

fn init_logs() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, NoTls).expect("a direct connection")
}

/// The application's pool: both servers, read-write only, a short checkout timeout so the threads
/// see the outage instead of waiting it out in the pool.
fn pool(pg: &ReplicatedPostgres) -> Db {
    Db::builder(pg.url())
        .and_then(|b| b.max_size(8))
        .and_then(|b| b.connection_timeout(Duration::from_secs(3)))
        .and_then(|b| b.build())
        .expect("the two-host URL connects")
}

/// The lease and leader tables, and the ledger fenced writes go to.
fn create_tables(db: &Db, url: &str) {
    Leases::new(db).create_table().unwrap();
    Elector::new(db).create_table().unwrap();
    client(url)
        .batch_execute(
            "CREATE TABLE ledger (id bigserial PRIMARY KEY, key text NOT NULL,
                                  token bigint NOT NULL, owner text NOT NULL,
                                  write bigint NOT NULL)",
        )
        .unwrap();
}

/// A ledger row: `(id, key, token, owner, write)`.
type Row = (i64, String, i64, String, i64);

/// Every ledger row, in ledger order.
fn ledger(url: &str) -> Vec<Row> {
    client(url)
        .query(
            "SELECT id, key, token, owner, write FROM ledger ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// The writes (transactions) a ledger holds. Not its row ids: after an asynchronous promotion the
/// ledger's `bigserial` hands out the ids of lost rows again, as the token sequences do.
fn writes(rows: &[Row]) -> BTreeSet<i64> {
    rows.iter().map(|r| r.4).collect()
}

/// Asserts that, per key, the ledger's tokens never go down and each token has one owner: no two
/// tenures' fenced writes landed out of order.
fn assert_ledger_ordered(rows: &[Row]) {
    let mut last: std::collections::BTreeMap<&str, (i64, &str)> = Default::default();
    for (id, key, token, owner, _) in rows {
        if let Some((t, o)) = last.get(key.as_str()) {
            assert!(
                token > t || (token == t && o == owner),
                "ledger row {id}: {key} token {token} of {owner} after token {t} of {o}"
            );
        }
        last.insert(key, (*token, owner));
    }
}

/// What a fenced write came to.
enum Write {
    /// Committed: the commit returned Ok, with the write's number (its rows' `write`).
    Acked(i64),
    /// A fence said no: nothing written.
    Refused,
    /// An error (the outage): not acknowledged.
    Failed,
}

/// One transaction: the fences of the lease tenure `token` of `KEY` and, when given, of the
/// leadership `term`, then one ledger row per tenure.
fn fenced_write(
    db: &Db,
    leases: &Leases,
    token: i64,
    leader: Option<(&Elector, i64)>,
    owner: &str,
) -> Write {
    static WRITES: AtomicI64 = AtomicI64::new(1);
    let write = WRITES.fetch_add(1, Ordering::SeqCst);
    let attempt = || -> Result<bool, Box<dyn std::error::Error>> {
        let mut conn = db.connection()?;
        let mut tx = conn.transaction()?;
        let insert = "INSERT INTO ledger (key, token, owner, write) VALUES ($1, $2, $3, $4)";
        if !leases.fence(&mut tx, KEY, token)? {
            return Ok(false);
        }
        tx.execute(insert, &[&KEY, &token, &owner, &write])?;
        if let Some((elector, term)) = leader {
            if !elector.fence(&mut tx, term)? {
                return Ok(false);
            }
            tx.execute(insert, &[&LEADER_KEY, &term, &owner, &write])?;
        }
        tx.commit()?;
        Ok(true)
    };
    match attempt() {
        Ok(true) => Write::Acked(write),
        Ok(false) => Write::Refused,
        Err(_) => Write::Failed,
    }
}

/// A thread that runs `step` every `every` until stopped; `stop` joins it.
struct Looping {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Looping {
    fn start(every: Duration, mut step: impl FnMut() + Send + 'static) -> Looping {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                step();
                std::thread::sleep(every);
            }
        });
        Looping {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("a test thread");
        }
    }
}

impl Drop for Looping {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One trial's figures, a row of the printed table.
#[derive(Debug, Default, Clone)]
struct Trial {
    outage: Duration,
    /// `None` where the trial gives them up on purpose (the asynchronous one).
    lease_survived: Option<bool>,
    leadership_survived: Option<bool>,
    /// From the promotion to a successor's grant of the key (the asynchronous trial).
    successor_wait: Option<Duration>,
    /// The longest time between two acknowledged fenced writes of the holder (the synchronous
    /// trial): what the application saw of the outage.
    write_gap: Option<Duration>,
    acked: usize,
    lost_acked: usize,
    contender_grants: usize,
    token_before: i64,
    token_after: i64,
    term_before: i64,
    term_after: i64,
}

fn shown(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

fn print_table(title: &str, trials: &[Trial]) {
    let mut out = format!(
        "\n{title}\n trial | outage ms | write gap ms | lease kept | leadership kept | acked writes | lost acked \
         | contender grants | token before -> after | term before -> after | successor after ms\n"
    );
    for (i, t) in trials.iter().enumerate() {
        out.push_str(&format!(
            " {:>5} | {:>9} | {:>12} | {:>10} | {:>15} | {:>12} | {:>10} | {:>16} | {:>8} -> {:<8} | {:>6} -> {:<9} | {}\n",
            i + 1,
            t.outage.as_millis(),
            t.write_gap
                .map_or("-".to_owned(), |d| d.as_millis().to_string()),
            shown(t.lease_survived),
            shown(t.leadership_survived),
            t.acked,
            t.lost_acked,
            t.contender_grants,
            t.token_before,
            t.token_after,
            t.term_before,
            t.term_after,
            t.successor_wait
                .map_or("-".to_owned(), |d| d.as_millis().to_string()),
        ));
    }
    println!("{out}");
}

/// The harness: the standby follows, a frozen standby falls behind, a failover loses what it had
/// not received and leaves a writable server behind the two-host URL, and `stop` cleans up.
#[test]
fn the_harness_streams_freezes_and_fails_over() {
    init_logs();
    let started = Instant::now();
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let start_time = started.elapsed();
    let mut primary = client(pg.primary_url());
    primary
        .batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
        .unwrap();
    let mut standby = client(pg.standby_url());
    wait_for(
        "the standby to replay the row",
        Duration::from_secs(10),
        || {
            let n: i64 = standby
                .query_one("SELECT count(*) FROM t", &[])
                .ok()?
                .get(0);
            (n == 1).then_some(())
        },
    );
    assert!(standby.batch_execute("INSERT INTO t VALUES (9)").is_err());
    wait_for("no lag", Duration::from_secs(10), || {
        (pg.replication_lag().unwrap() == 0).then_some(())
    });

    pg.freeze_replication();
    primary.batch_execute("INSERT INTO t VALUES (2)").unwrap();
    assert!(pg.replication_lag().unwrap() > 0, "the standby is behind");
    drop(primary);

    let outage = pg.fail_over().unwrap();
    let mut app = client(pg.url());
    let values: Vec<i32> = app
        .query("SELECT v FROM t ORDER BY v", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        values,
        [1],
        "the row the frozen standby never received is lost"
    );
    app.batch_execute("INSERT INTO t VALUES (3)").unwrap();
    // Db::connect takes both forms of a multi-host connection string, and reaches the server
    // that accepts writes (the second host, now that the first is dead).
    let pairs = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write",
        port_of(pg.primary_url()),
        port_of(pg.standby_url())
    );
    for url in [pg.url(), pairs.as_str()] {
        let db = Db::connect(url).unwrap();
        let mut conn = db.connection().unwrap();
        conn.batch_execute("INSERT INTO t VALUES (4)").unwrap();
    }
    assert!(pg.fail_over().unwrap_err().to_string().contains("already"));
    assert!(client(pg.standby_url())
        .query_one("SELECT NOT pg_is_in_recovery()", &[])
        .unwrap()
        .get::<_, bool>(0));
    println!("harness: start {start_time:?}, failover outage {outage:?}");

    let dirs = [pg.primary_dir().to_owned(), pg.standby_dir().to_owned()];
    assert!(dirs.iter().all(|d| d.join("data").is_dir()), "{dirs:?}");
    pg.stop().unwrap();
    assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

/// In synchronous mode a frozen standby holds every commit up (the primary waits for its
/// confirmation, `wait_event` `SyncRep`) until it is thawed.
#[test]
fn a_frozen_synchronous_standby_holds_commits_until_thawed() {
    init_logs();
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let mut primary = client(pg.primary_url());
    primary.batch_execute("CREATE TABLE t (v int)").unwrap();
    pg.freeze_replication();
    let url = pg.url().to_owned();
    let insert = std::thread::spawn(move || {
        client(&url)
            .batch_execute("SET application_name = 'held'; INSERT INTO t VALUES (1)")
            .map_err(|e| e.to_string())
    });
    wait_for(
        "the commit to wait for the standby",
        Duration::from_secs(10),
        || {
            let waiting: i64 = primary
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = 'held' AND wait_event = 'SyncRep'",
                    &[],
                )
                .unwrap()
                .get(0);
            (waiting == 1).then_some(())
        },
    );
    assert!(!insert.is_finished());
    pg.thaw_replication();
    wait_for("the held commit", Duration::from_secs(10), || {
        insert.is_finished().then_some(())
    });
    insert
        .join()
        .unwrap()
        .expect("the commit returns once thawed");
    let rows: i64 = client(pg.standby_url())
        .query_one("SELECT count(*) FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 1,
        "a synchronous commit is on the standby when it returns"
    );
    pg.stop().unwrap();
}

#[test]
fn a_killed_process_leaves_neither_server_nor_directory_behind() {
    if std::env::var(CHILD_ENV).is_ok() {
        let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
        println!(
            "PORTS={},{}",
            port_of(pg.primary_url()),
            port_of(pg.standby_url())
        );
        println!("READY");
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_process_leaves_neither_server_nor_directory_behind",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "kill")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut ports: Vec<u16> = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, list)) = line.split_once("PORTS=") {
            ports = list.split(',').map(|p| p.trim().parse().unwrap()).collect();
        }
        if line.ends_with("READY") {
            break;
        }
    }
    assert_eq!(ports.len(), 2, "the child started both servers");
    assert!(ports.iter().all(|p| accepts(*p)));
    assert_eq!(temp_dirs_of(pid).len(), 2);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for(
        "both orphaned servers to stop and their directories to go",
        Duration::from_secs(30),
        || (ports.iter().all(|p| !accepts(*p)) && temp_dirs_of(pid).is_empty()).then_some(()),
    );
}

/// One synchronous trial: a holder with a managed lease and the leadership writes fenced rows every
/// 20 ms through the two-host URL, a contender polls every 100 ms; the primary is killed and the
/// standby promoted.
fn synchronous_trial() -> Trial {
    // Several seconds longer than the ~1-2 s failover measured here.
    let ttl = Duration::from_secs(8);
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());

    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = Arc::new(holder.acquire(KEY, ttl).unwrap().expect("a free key"));
    let token = lease.token();
    let elector = Elector::new(&db)
        .with_holder("holder")
        .unwrap()
        .with_ttl(ttl)
        .unwrap()
        .with_retry_period(Duration::from_millis(500))
        .unwrap();
    let leadership = elector.campaign().unwrap();
    let term = elected(&leadership);

    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let acked_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut writer = {
        let (db, holder, elector) = (db.clone(), holder.clone(), leadership.elector().clone());
        let (acked, failed, refused) = (acked.clone(), failed.clone(), refused.clone());
        let acked_at = acked_at.clone();
        Looping::start(WRITE_EVERY, move || {
            match fenced_write(&db, &holder, token, Some((&elector, term)), "holder") {
                Write::Acked(id) => {
                    acked.lock().unwrap().push(id);
                    acked_at.lock().unwrap().push(Instant::now());
                }
                Write::Refused => {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                Write::Failed => {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let grants = Arc::new(AtomicUsize::new(0));
    let mut contender = {
        let leases = Leases::new(&db).with_owner("contender").unwrap();
        let elector = Elector::new(&db)
            .with_holder("contender")
            .unwrap()
            .with_ttl(ttl)
            .unwrap();
        let grants = grants.clone();
        Looping::start(POLL_EVERY, move || {
            if let Ok(Some(_)) = leases.try_acquire(KEY, ttl) {
                grants.fetch_add(1, Ordering::SeqCst);
            }
            if let Ok(true) = elector.is_leader() {
                grants.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let acks = || acked.lock().unwrap().len();
    wait_for("20 fenced writes before", Duration::from_secs(20), || {
        (acks() >= 20).then_some(())
    });

    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();
    let before = acks();
    wait_for("20 fenced writes after", Duration::from_secs(30), || {
        (acks() >= before + 20).then_some(())
    });
    writer.stop();
    contender.stop();

    let lease_survived = lease.is_held() && lease.loss().is_none();
    let leadership_survived = leadership.term() == Some(term);
    let acked = acked.lock().unwrap().clone();
    let write_gap = acked_at
        .lock()
        .unwrap()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let rows = ledger(pg.url());
    let on_new = writes(&rows);
    let lost_acked = acked.iter().filter(|id| !on_new.contains(id)).count();
    assert_ledger_ordered(&rows);
    let row = holder.holder(KEY).unwrap().expect("the lease row");
    assert_eq!((row.owner.as_str(), row.token), ("holder", token));
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "no fence refused the holder"
    );

    // New tenures after the promotion get larger tokens and terms, once the hold-off that follows
    // a promotion (one longest TTL) has passed; a Db that opts out grants at once.
    Arc::into_inner(lease).unwrap().release().unwrap();
    leadership.stop().unwrap();
    let next = Leases::new(&db).with_owner("next").unwrap();
    assert!(next.try_acquire(KEY, ttl).unwrap().is_none(), "held off");
    let eager = Leases::new(&db.clone().with_promotion_hold_off(false))
        .with_owner("eager")
        .unwrap();
    let early = eager
        .try_acquire(KEY, ttl)
        .unwrap()
        .expect("no hold-off when opted out");
    assert!(early.token() > token);
    assert!(eager.release(KEY).unwrap());
    let next = wait_for("the hold-off to pass", ttl * 2, || {
        next.try_acquire(KEY, ttl).ok().flatten()
    });
    let successor_wait = promoted.elapsed();
    let next_elector = Elector::new(&db)
        .with_holder("next")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    wait_for("the election's hold-off to pass", ttl * 2, || {
        next_elector.is_leader().ok().filter(|l| *l)
    });
    let trial = Trial {
        outage,
        lease_survived: Some(lease_survived),
        leadership_survived: Some(leadership_survived),
        successor_wait: Some(successor_wait),
        write_gap: Some(write_gap),
        acked: acked.len(),
        lost_acked,
        contender_grants: grants.load(Ordering::SeqCst),
        token_before: token,
        token_after: next.token(),
        term_before: term,
        term_after: next_elector.term().unwrap(),
    };
    pg.stop().unwrap();
    trial
}

#[test]
fn a_synchronous_failover_keeps_every_acknowledged_write_the_lease_and_the_leadership() {
    init_logs();
    let trials: Vec<Trial> = (0..3).map(|_| synchronous_trial()).collect();
    print_table(
        "synchronous standby, primary killed and standby promoted",
        &trials,
    );
    for t in &trials {
        assert_eq!(t.lost_acked, 0, "{t:?}");
        assert_eq!(t.lease_survived, Some(true), "{t:?}");
        assert_eq!(t.leadership_survived, Some(true), "{t:?}");
        assert_eq!(t.contender_grants, 0, "{t:?}");
        assert!(t.token_after > t.token_before, "{t:?}");
        assert!(t.term_after > t.term_before, "{t:?}");
        assert!(t.acked >= 40, "{t:?}");
    }
}

/// What an asynchronous trial found beyond the table's figures.
#[derive(Debug, Default)]
struct Lagging {
    trial: Trial,
    /// Bytes of WAL the standby had not received when the primary was killed.
    lag: u64,
    /// Fenced writes of tenures the new primary never heard of, or of the old holder after a
    /// successor took the key: refused, or (never) acknowledged.
    stale_refused: usize,
    stale_acked: usize,
}

/// Retries `write` while it fails (a pooled connection to the dead primary), up to 10 s.
fn settled(mut write: impl FnMut() -> Write) -> Write {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match write() {
            Write::Failed if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => return other,
        }
    }
}

/// One asynchronous trial: the holder writes fenced rows while the standby follows; replication is
/// frozen; on the primary alone the holder writes on, then releases and resigns, and 40 other
/// owners take the key and the leadership in turn (each tenure a new token and term, each writing
/// a fenced row), the last of them ("stale") still holding both; the primary is killed and the
/// standby promoted; a successor takes over on the new primary.
fn asynchronous_trial() -> Lagging {
    let ttl = Duration::from_secs(3);
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());

    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let token = lease.token();
    let elector = Elector::new(&db)
        .with_holder("holder")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    let leadership = elector.campaign().unwrap();
    let term = elected(&leadership);
    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let mut writer = {
        let (db, holder, elector) = (db.clone(), holder.clone(), leadership.elector().clone());
        let acked = acked.clone();
        Looping::start(WRITE_EVERY, move || {
            if let Write::Acked(id) =
                fenced_write(&db, &holder, token, Some((&elector, term)), "holder")
            {
                acked.lock().unwrap().push(id);
            }
        })
    };
    let acks = || acked.lock().unwrap().len();
    wait_for("20 fenced writes", Duration::from_secs(20), || {
        (acks() >= 20).then_some(())
    });

    pg.freeze_replication();
    let frozen_at = acks();
    wait_for(
        "10 fenced writes the standby never gets",
        Duration::from_secs(20),
        || (acks() >= frozen_at + 10).then_some(()),
    );
    writer.stop();
    lease.release().unwrap();
    leadership.stop().unwrap();
    let (mut max_token, mut max_term) = (token, term);
    let mut last = None;
    for i in 0..40 {
        let owner = if i == 39 {
            "stale".to_owned()
        } else {
            format!("churn{i}")
        };
        let leases = Leases::new(&db).with_owner(&owner).unwrap();
        let grant = leases
            .try_acquire(KEY, Duration::from_secs(60))
            .unwrap()
            .expect("free");
        let elector = Elector::new(&db)
            .with_holder(&owner)
            .unwrap()
            .with_ttl(Duration::from_secs(60))
            .unwrap();
        assert!(elector.is_leader().unwrap(), "{owner} is elected");
        let term = elector.term().unwrap();
        assert!(grant.token() > max_token && term > max_term);
        (max_token, max_term) = (grant.token(), term);
        match fenced_write(&db, &leases, grant.token(), Some((&elector, term)), &owner) {
            Write::Acked(id) => acked.lock().unwrap().push(id),
            _ => panic!("{owner}'s fenced write on the primary"),
        }
        if i < 39 {
            assert!(leases.release(KEY).unwrap());
            elector.resign().unwrap();
        } else {
            last = Some((leases, grant.token(), elector, term));
        }
    }
    let (stale, stale_token, stale_elector, stale_term) = last.unwrap();
    let lag = pg.replication_lag().unwrap();
    assert!(lag > 0, "the standby lags");

    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();
    let mut result = Lagging {
        lag,
        ..Lagging::default()
    };
    let mut stale_write = |w: Write| match w {
        Write::Acked(_) => result.stale_acked += 1,
        Write::Refused => result.stale_refused += 1,
        Write::Failed => panic!("a fenced write failed 10 s after the promotion"),
    };
    // The holder of the key on the old primary: its tenure never reached the new one.
    stale_write(settled(|| {
        fenced_write(
            &db,
            &stale,
            stale_token,
            Some((&stale_elector, stale_term)),
            "stale",
        )
    }));
    stale_write(settled(|| {
        fenced_write(&db, &stale, stale_token, None, "stale")
    }));

    // A successor takes the key and the leadership once the tenures the new primary knows lapse
    // and the hold-off after the promotion (the TTL, as it asks for the holder's) has passed.
    let successor = Leases::new(&db).with_owner("successor").unwrap();
    let successor_elector = Elector::new(&db)
        .with_holder("successor")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    let (mut grant, mut elected) = (None, false);
    wait_for(
        "the successor's grant and election",
        Duration::from_secs(15),
        || {
            if grant.is_none() {
                grant = successor.try_acquire(KEY, ttl).ok().flatten();
            }
            elected = elected || successor_elector.is_leader().unwrap_or(false);
            (grant.is_some() && elected).then_some(())
        },
    );
    let grant = grant.unwrap();
    let successor_wait = promoted.elapsed();
    let successor_term = successor_elector.term().unwrap();
    for _ in 0..5 {
        let w = fenced_write(
            &db,
            &successor,
            grant.token(),
            Some((&successor_elector, successor_term)),
            "successor",
        );
        assert!(matches!(w, Write::Acked(_)), "the successor writes");
    }
    // The old holder and the stale one, now that a successor holds the key.
    stale_write(fenced_write(
        &db,
        &holder,
        token,
        Some((&elector, term)),
        "holder",
    ));
    stale_write(fenced_write(&db, &holder, token, None, "holder"));
    stale_write(fenced_write(&db, &stale, stale_token, None, "stale"));

    let rows = ledger(pg.url());
    assert_ledger_ordered(&rows);
    let on_new = writes(&rows);
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked[frozen_at..].iter().all(|w| !on_new.contains(w)),
        "a write acknowledged after the freeze reached the standby"
    );
    // The new primary's own history only grows.
    assert!(grant.token() > token && successor_term > term);
    result.trial = Trial {
        outage,
        acked: acked.len(),
        lost_acked: acked.iter().filter(|id| !on_new.contains(id)).count(),
        token_before: max_token,
        token_after: grant.token(),
        term_before: max_term,
        term_after: successor_term,
        successor_wait: Some(successor_wait),
        ..Trial::default()
    };
    pg.stop().unwrap();
    result
}

fn print_lagging(title: &str, trials: &[Lagging]) {
    let table: Vec<Trial> = trials.iter().map(|t| t.trial.clone()).collect();
    print_table(title, &table);
    for (i, t) in trials.iter().enumerate() {
        println!(
            " trial {}: {} bytes of WAL unreplicated at the kill; stale fenced writes refused {}, \
             acknowledged {}",
            i + 1,
            t.lag,
            t.stale_refused,
            t.stale_acked
        );
    }
}

#[test]
fn an_asynchronous_failover_refuses_stale_fenced_writes_and_keeps_the_ledger_ordered() {
    init_logs();
    let trials: Vec<Lagging> = (0..3).map(|_| asynchronous_trial()).collect();
    print_lagging(
        "asynchronous standby, frozen, primary killed and standby promoted",
        &trials,
    );
    for t in &trials {
        assert_eq!(t.stale_acked, 0, "{t:?}");
        assert_eq!(t.stale_refused, 5, "{t:?}");
        assert!(
            t.trial.lost_acked > 0,
            "the frozen standby lost acknowledged writes: {t:?}"
        );
    }
}

/// Every token and term granted after the promotion is greater than every one handed out before it,
/// those lost with the old primary included.
#[test]
fn an_asynchronous_failover_never_hands_out_a_token_or_term_again() {
    init_logs();
    let lagging = asynchronous_trial();
    let t = lagging.trial.clone();
    print_lagging(
        "asynchronous standby: tokens and terms across the promotion",
        &[lagging],
    );
    assert!(
        t.token_after > t.token_before,
        "token {} granted after the promotion, {} already handed out before",
        t.token_after,
        t.token_before
    );
    assert!(
        t.term_after > t.term_before,
        "term {} granted after the promotion, {} already handed out before",
        t.term_after,
        t.term_before
    );
}

/// The worst case: replication frozen longer than the TTL while the holder renews its lease
/// and leadership on the primary alone, so the promoted standby has them lapsed; and a key and a
/// leadership won after the freeze, which the standby never sees at all. A contender polls all four
/// every 10 ms from the promotion on. The new primary holds grants of lapsed and absent keys and
/// leaderships off after it first sees its new timeline, so the contender is granted nothing while
/// the old holder still believes it holds it, and the old holder's fenced writes are refused.
#[test]
fn an_asynchronous_failover_grants_nothing_the_old_holder_still_believes_it_holds() {
    init_logs();
    let ttl = Duration::from_secs(3);
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());
    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let unseen_holder = Leases::new(&db)
        .with_table(UNSEEN_LEASES)
        .unwrap()
        .with_owner("holder")
        .unwrap();
    unseen_holder.create_table().unwrap();
    let campaign = |table: &str, name: &str| {
        let leadership = Elector::new(&db)
            .with_table(table)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder("holder")
            .unwrap()
            .with_ttl(ttl)
            .unwrap()
            .campaign()
            .unwrap();
        let term = elected(&leadership);
        (leadership, term)
    };
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let (leadership, term) = campaign(pgtenure::elector::DEFAULT_TABLE, FLEET);
    Elector::new(&db)
        .with_table(UNSEEN_LEADER)
        .unwrap()
        .create_table()
        .unwrap();
    wait_for("the standby to catch up", Duration::from_secs(10), || {
        (pg.replication_lag().ok() == Some(0)).then_some(())
    });

    pg.freeze_replication();
    let unseen = unseen_holder
        .acquire(UNSEEN, ttl)
        .unwrap()
        .expect("a free key");
    let (unseen_leadership, unseen_term) = campaign(UNSEEN_LEADER, UNSEEN);
    let unseen_term = Some(unseen_term);
    // The standby misses every renewal for longer than the TTL.
    std::thread::sleep(ttl + Duration::from_millis(500));
    assert!(
        lease.is_held()
            && unseen.is_held()
            && leadership.is_leading()
            && unseen_leadership.is_leading(),
        "renewed on the primary"
    );
    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();

    let contender = Leases::new(&db).with_owner("contender").unwrap();
    let unseen_contender = Leases::new(&db)
        .with_table(UNSEEN_LEASES)
        .unwrap()
        .with_owner("contender")
        .unwrap();
    let contender_elector = |table: &str, name: &str| {
        Elector::new(&db)
            .with_table(table)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder("contender")
            .unwrap()
            .with_ttl(ttl)
            .unwrap()
    };
    let fleet_elector = contender_elector(pgtenure::elector::DEFAULT_TABLE, FLEET);
    let unseen_elector = contender_elector(UNSEEN_LEADER, UNSEEN);
    let mut first_refusal = None;
    let mut grant = None;
    // (what, granted this many ms after the promotion, the old holder believing it held it)
    let mut granted: Vec<(&str, u128, bool)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while granted.len() < 4 && Instant::now() < deadline {
        let done = |what: &str, granted: &Vec<(&str, u128, bool)>| {
            granted.iter().any(|(w, _, _)| *w == what)
        };
        let ms = || promoted.elapsed().as_millis();
        if !done("lease", &granted) {
            match contender.try_acquire(KEY, ttl) {
                Ok(Some(g)) => {
                    granted.push(("lease", ms(), lease.is_held()));
                    grant = Some(g);
                }
                Ok(None) if first_refusal.is_none() => {
                    first_refusal = contender.refusal(KEY).ok();
                }
                _ => {}
            }
        }
        if !done("unseen lease", &granted) {
            if let Ok(Some(_)) = unseen_contender.try_acquire(UNSEEN, ttl) {
                granted.push(("unseen lease", ms(), unseen.is_held()));
            }
        }
        // The old holder's campaign competes too once the hold-off is over, and on a loaded machine
        // it sometimes wins first (with a new term: it believes in that one, not the lost one).
        // Then it is asked to step down, so the contender's grant can be checked.
        if !done("leadership", &granted) {
            if fleet_elector.is_leader().unwrap_or(false) {
                granted.push(("leadership", ms(), leadership.is_leading()));
            } else if leadership.term().is_some_and(|t| t > term) {
                let _ = fleet_elector.request_resign();
            }
        }
        if !done("unseen leadership", &granted) {
            if unseen_elector.is_leader().unwrap_or(false) {
                granted.push(("unseen leadership", ms(), unseen_leadership.is_leading()));
            } else if unseen_leadership.term().is_some() && unseen_leadership.term() != unseen_term
            {
                let _ = unseen_elector.request_resign();
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "\nasynchronous standby frozen {} ms (TTL {} ms), primary killed: outage {} ms; granted \
         to the contender (ms after the promotion, the old holder still believing it held it): \
         {granted:?}",
        (ttl + Duration::from_millis(500)).as_millis(),
        ttl.as_millis(),
        outage.as_millis(),
    );
    assert_eq!(
        granted.len(),
        4,
        "everything granted within 15 s: {granted:?}"
    );
    assert!(
        granted.iter().all(|(_, _, believed)| !believed),
        "granted while the old holder believed it held it: {granted:?}"
    );
    assert!(
        matches!(first_refusal, Some(Refusal::HeldOff { .. })),
        "the contender's first refusal: {first_refusal:?}"
    );

    // Writes stay safe: the old holder's fences fail, the contender's pass.
    let grant = grant.unwrap();
    let holder_write = settled(|| {
        fenced_write(
            &db,
            &holder,
            lease.token(),
            Some((leadership.elector(), term)),
            "holder",
        )
    });
    assert!(
        matches!(holder_write, Write::Refused),
        "the old holder's write"
    );
    let contender_write = fenced_write(
        &db,
        &contender,
        grant.token(),
        Some((&fleet_elector, fleet_elector.term().unwrap())),
        "contender",
    );
    assert!(
        matches!(contender_write, Write::Acked(_)),
        "the contender's write"
    );
    assert!(grant.token() > lease.token().max(unseen.token()));
    assert_ledger_ordered(&ledger(pg.url()));
    drop((lease, unseen, leadership, unseen_leadership));
    pg.stop().unwrap();
}

/// The term of `leadership`'s first event, which must be its election (within 10 s).
fn elected(leadership: &pgtenure::Leadership) -> i64 {
    match leadership
        .events()
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
    {
        LeaderEvent::Elected { term } => term,
        other => panic!("expected to be elected, got {other:?}"),
    }
}

/// After a failover that nobody asks a grant of, the holder's own renewal tells the new primary's
/// promotion record that it was promoted, so the hold-off starts then: a grant asked long after the
/// promotion waits for nothing (it used to start the hold-off itself, and wait a whole TTL).
#[test]
fn a_renewal_starts_the_hold_off_so_a_later_grant_waits_for_nothing() {
    init_logs();
    // Long enough that the lease outlives the outage on a loaded machine (two servers per test,
    // tests in parallel on two cores): a lease lost during the failover renews nothing after it.
    let ttl = Duration::from_secs(10);
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());
    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();

    // Only the holder's renewals reach the new primary.
    let recorded = format!(
        "SELECT seen_at IS NOT NULL AND grants_from <= now() + interval '{} seconds'
           FROM pgtenure_leases_promotion",
        ttl.as_secs()
    );
    wait_for("the promotion recorded", ttl, || {
        assert!(
            lease.is_held(),
            "the lease lapsed during a {outage:?} outage: {:?}",
            lease.loss()
        );
        client(pg.url())
            .query_one(recorded.as_str(), &[])
            .ok()
            .and_then(|row| row.get::<_, bool>(0).then_some(()))
    });
    let recorded_after = promoted.elapsed();
    wait_for("the hold-off to pass", ttl * 2, || {
        client(pg.url())
            .query_one(
                "SELECT grants_from <= now() FROM pgtenure_leases_promotion",
                &[],
            )
            .ok()
            .and_then(|row| row.get::<_, bool>(0).then_some(()))
    });
    let contender = Leases::new(&db).with_owner("contender").unwrap();
    let grant = contender.try_acquire(UNSEEN, ttl).unwrap();
    assert!(
        grant.is_some(),
        "the first grant after the hold-off passed is granted at once: {:?}",
        contender.refusal(UNSEEN)
    );
    assert!(
        lease.is_held(),
        "the holder kept its lease across the failover"
    );
    println!(
        "\nsynchronous standby: the holder's renewal recorded the promotion {} ms after it; the \
         first grant, {} ms after the promotion, was granted at once",
        recorded_after.as_millis(),
        promoted.elapsed().as_millis()
    );
    drop(lease);
    pg.stop().unwrap();
}
