//! The mutual-exclusion checker: many workers (threads and separate processes) contend for a few
//! keys with short TTLs while faults are injected at random; every tenure writes to a ledger through
//! a fence. Afterwards the ledger and the lease rows must prove that no two tenures of a key
//! overlapped, tokens only grew in ledger order, and no write by a token landed after a higher token
//! wrote. The same for the elector (term-fenced writes) and for membership (no unit worked on by two
//! processes at once).
//!
//! Faults: network cuts, blackholes, latency, backends killed, idle backends ended, connections
//! closed right after the server's answer (the statement committed, the answer is lost), new
//! connections delayed (so deadline cancels land late), paused worker processes; some pools end idle
//! sessions themselves (`idle_session_timeout`). Every test also runs busy threads that load the
//! CPUs in bursts (`PGTENURE_CHECKER_LOAD` of them, default 2), so ordering races show on two cores.
//! Leases add short TTLs (renewals finishing at their deadline race the watcher's cancel: any
//! application statement cancelled is a failure), two threads of one family contending for a key
//! (no lease may still say `is_held` after another lease of its key was granted); membership adds a
//! slow reconciler.
//!
//! Length: `PGTENURE_CHECKER_SECS` seconds (default 20), e.g. an hour:
//! `PGTENURE_CHECKER_SECS=3600 cargo test --release --test checker -- --nocapture --test-threads 3`
//! (the three primitives side by side).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::beliefs::Beliefs;
use common::proxy::{database_addr, Proxy};
use common::registry::{Registry, Worker};
use common::{client, ledger, wait_for, Running, Tables};
use parking_lot::Mutex;
use pgtenure::crossbeam_channel::{after, select};
use pgtenure::membership::{Config, Leaser, NoHooks, Unit, Units};
use pgtenure::postgres::error::SqlState;
use pgtenure::{Db, Elector, Leases, LossReason};

const CHILD_ENV: &str = "PGTENURE_CHECKER_CHILD";
const KEYS: [&str; 3] = ["k0", "k1", "k2"];

/// Busy threads that load the CPUs in bursts until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(salt: u64) -> Load {
        let n: u64 = std::env::var("PGTENURE_CHECKER_LOAD")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut rng = Rng::new(salt * 31 + i);
                    let mut x = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        let until = Instant::now() + rng.millis(20, 400);
                        while Instant::now() < until {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                        thread::sleep(rng.millis(0, 150));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run_for() -> Duration {
    let secs = std::env::var("PGTENURE_CHECKER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// A small xorshift generator: the tests need variety, not quality.
struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Rng((nanos
            ^ (u64::from(std::process::id()) << 32)
            ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

/// A URL through `proxy` with an application name the fault injector can kill backends by.
fn proxied_url(proxy: &Proxy, app: &str) -> String {
    let config = proxy.config();
    let user = config.get_user().unwrap_or("postgres");
    let db = config.get_dbname().unwrap_or("postgres");
    format!(
        "postgres://{user}@127.0.0.1:{}/{db}?application_name={app}",
        proxy.port()
    )
}

/// The same URL, for a pool whose sessions the server ends after `ms` idle milliseconds.
fn idle_ending_url(proxy: &Proxy, app: &str, ms: u32) -> String {
    format!(
        "{}&options=-c%20idle_session_timeout%3D{ms}",
        proxied_url(proxy, app)
    )
}

/// What a worker did.
#[derive(Debug, Default)]
struct Counts {
    written: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    acquired: AtomicU64,
    losses: AtomicU64,
    worst_late_us: AtomicU64,
    /// Application statements (and operations that never hand out a cancel key) cancelled.
    stray_cancels: AtomicU64,
}

impl Counts {
    /// Counts a statement that was cancelled although no cancel key was ever handed out for it.
    fn stray_cancel(&self, code: Option<&SqlState>, what: &str, e: &dyn std::fmt::Display) {
        if code == Some(&SqlState::QUERY_CANCELED) {
            self.stray_cancels.fetch_add(1, Ordering::SeqCst);
            eprintln!("{what} was cancelled: {e}");
        }
    }

    fn line(&self) -> String {
        format!(
            "STATS {} {} {} {} {} {} {}",
            self.written.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.acquired.load(Ordering::SeqCst),
            self.losses.load(Ordering::SeqCst),
            self.worst_late_us.load(Ordering::SeqCst),
            self.stray_cancels.load(Ordering::SeqCst)
        )
    }

    fn add_line(&self, line: &str) {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|s| s.parse().ok())
            .collect();
        if let [w, r, f, a, l, late, stray] = v[..] {
            self.stray_cancels.fetch_add(stray, Ordering::SeqCst);
            self.written.fetch_add(w, Ordering::SeqCst);
            self.refused.fetch_add(r, Ordering::SeqCst);
            self.failed.fetch_add(f, Ordering::SeqCst);
            self.acquired.fetch_add(a, Ordering::SeqCst);
            self.losses.fetch_add(l, Ordering::SeqCst);
            self.worst_late_us.fetch_max(late, Ordering::SeqCst);
        }
    }
}

/// One fenced ledger write; counts the outcome. `fence` runs the fence inside the transaction.
fn write(
    db: &Db,
    ledger: &str,
    key: &str,
    token: i64,
    owner: &str,
    counts: &Counts,
    fence: impl FnOnce(&mut pgtenure::postgres::Transaction<'_>) -> pgtenure::Result<bool>,
) {
    let cancelled = |e: &pgtenure::postgres::Error| {
        counts.stray_cancel(e.code(), "an application statement", e);
    };
    let outcome = (|| -> Option<bool> {
        let mut conn = db.pool().get().ok()?;
        let mut tx = conn.transaction().inspect_err(cancelled).ok()?;
        match fence(&mut tx) {
            Ok(true) => {}
            Ok(false) => return Some(false),
            Err(e) => {
                counts.stray_cancel(e.code(), "a fence", &e);
                return None;
            }
        }
        let insert = format!("INSERT INTO {ledger} (key, token, owner) VALUES ($1, $2, $3)");
        tx.execute(&insert, &[&key, &token, &owner])
            .inspect_err(cancelled)
            .ok()?;
        tx.commit().inspect_err(cancelled).ok()?;
        Some(true)
    })();
    let counter = match outcome {
        Some(true) => &counts.written,
        Some(false) => &counts.refused,
        None => &counts.failed,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

/// Every acknowledged write landed, and no more than those plus the failed ones: a commit whose
/// acknowledgement a fault cut off is counted as failed, yet may have landed. Returns how many did.
fn assert_landed(landed: usize, counts: &Counts) -> u64 {
    let (written, failed) = (
        counts.written.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
    );
    let landed = landed as u64;
    assert!(
        written <= landed && landed <= written + failed,
        "the ledger has {landed} rows for {written} acknowledged and {failed} failed writes"
    );
    landed - written
}

/// The lease worker loop, in a thread or a child process; `leases` may be shared with other
/// workers (one family).
#[allow(clippy::too_many_arguments)]
fn lease_worker(
    db: &Db,
    leases: &Leases,
    ledger: &str,
    seed: u64,
    until: Instant,
    counts: &Counts,
    beliefs: &Beliefs,
) {
    let owner = leases.owner().to_owned();
    let owner = owner.as_str();
    let mut rng = Rng::new(seed);
    let stray = |e: &pgtenure::Error| {
        counts.stray_cancel(e.code(), "an operation without a cancel key", e);
    };
    while Instant::now() < until {
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        // Now and then a TTL so short that renewals finish right at their deadline.
        let ttl = if rng.below(4) == 0 {
            rng.millis(30, 90)
        } else {
            rng.millis(100, 500)
        };
        if rng.below(3) > 0 {
            // Managed: write while held, watch the loss channel between writes.
            let writes = 1 + rng.below(8);
            let held = leases.with_lease(key, ttl, |lease| {
                counts.acquired.fetch_add(1, Ordering::SeqCst);
                let me = beliefs.granted(key, lease, owner);
                for _ in 0..writes {
                    beliefs.check(key, me, lease);
                    if !lease.is_held() {
                        break;
                    }
                    write(db, ledger, key, lease.token(), owner, counts, |tx| leases.fence(tx, key, lease.token()));
                    beliefs.check(key, me, lease);
                    select! {
                        recv(lease.lost()) -> reason => {
                            counts.losses.fetch_add(1, Ordering::SeqCst);
                            if reason == Ok(LossReason::Expired) {
                                let late = Instant::now().saturating_duration_since(lease.deadline());
                                counts.worst_late_us.fetch_max(late.as_micros() as u64, Ordering::SeqCst);
                            }
                            break;
                        }
                        recv(after(Duration::from_millis(20))) -> _ => {}
                    }
                }
                beliefs.check(key, me, lease);
            });
            if let Err(e) = held {
                stray(&e);
            }
        } else {
            match leases.try_acquire(key, ttl) {
                Ok(Some(grant)) => {
                    // Raw and never renewed: keeps writing past its TTL, as a stalled holder would.
                    counts.acquired.fetch_add(1, Ordering::SeqCst);
                    let stop = Instant::now() + ttl + ttl / 2;
                    while Instant::now() < stop {
                        write(db, ledger, key, grant.token(), owner, counts, |tx| {
                            leases.fence(tx, key, grant.token())
                        });
                        thread::sleep(Duration::from_millis(25));
                    }
                }
                Ok(None) => {}
                Err(e) => stray(&e),
            }
        }
        thread::sleep(rng.millis(0, 30));
    }
}

/// Random faults until `until`: cuts, blackholes, latency, backend kills, process pauses.
fn inject_faults(
    proxy: &Proxy,
    app: &str,
    children: &Mutex<Vec<Child>>,
    until: Instant,
    seed: u64,
) -> BTreeMap<&'static str, u64> {
    let mut rng = Rng::new(seed);
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut admin = client();
    while Instant::now() < until {
        thread::sleep(rng.millis(200, 600));
        let kind = match rng.below(8) {
            0 => {
                proxy.cut();
                "cut every connection"
            }
            1 => {
                proxy.blackhole();
                thread::sleep(rng.millis(50, 900));
                proxy.heal();
                "blackhole (50-900 ms)"
            }
            2 => {
                proxy.set_latency(rng.millis(1, 40));
                thread::sleep(rng.millis(100, 500));
                proxy.set_latency(Duration::ZERO);
                "latency (1-40 ms)"
            }
            3 => {
                let _ = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", &[&app]);
                "kill backends"
            }
            4 => {
                let _ = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'", &[&app]);
                "end idle sessions"
            }
            5 => {
                // The next statement commits and its answer is lost with the connection.
                proxy.fin_after_answer("");
                thread::sleep(rng.millis(50, 300));
                "close a connection right after an answer"
            }
            6 => {
                proxy.set_connect_delay(rng.millis(50, 400));
                thread::sleep(rng.millis(200, 800));
                proxy.set_connect_delay(Duration::ZERO);
                "delay new connections (late cancels)"
            }
            _ => {
                let pids: Vec<String> =
                    children.lock().iter().map(|c| c.id().to_string()).collect();
                let Some(pid) = pids.get(rng.below(pids.len().max(1) as u64) as usize) else {
                    continue;
                };
                let _ = Command::new("kill").args(["-STOP", pid]).status();
                thread::sleep(rng.millis(100, 900));
                let _ = Command::new("kill").args(["-CONT", pid]).status();
                "pause a worker process (100-900 ms)"
            }
        };
        *faults.entry(kind).or_default() += 1;
    }
    proxy.heal();
    proxy.set_latency(Duration::ZERO);
    proxy.set_connect_delay(Duration::ZERO);
    faults
}

#[test]
fn leases_under_random_faults_never_overlap_and_no_stale_write_lands() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "lease-worker") {
        let env = |k: &str| std::env::var(k).unwrap();
        let counts = Counts::default();
        let until = Instant::now() + Duration::from_millis(env("CHECKER_MILLIS").parse().unwrap());
        let owner = format!("process-{}", std::process::id());
        let db = common::db();
        let leases = Leases::new(&db)
            .with_table(&env("CHECKER_TABLE"))
            .unwrap()
            .with_owner(&owner)
            .unwrap();
        let beliefs = Beliefs::default();
        lease_worker(
            &db,
            &leases,
            &env("CHECKER_LEDGER"),
            7,
            until,
            &counts,
            &beliefs,
        );
        assert_eq!(
            beliefs.violations.load(Ordering::SeqCst),
            0,
            "two beliefs overlapped"
        );
        println!("{}", counts.line());
        return;
    }
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let ledger = ledger::create(&mut tables);
    Leases::new(&common::db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("checker");
    let url = proxied_url(&proxy, &app);
    let pool = |url: &str| {
        Db::builder(url)
            .unwrap()
            .connection_timeout(Duration::from_secs(2))
            .unwrap()
            .build()
            .unwrap()
    };
    let db = pool(&url);
    // A second pool whose idle sessions the server ends after 150 ms.
    let idle_db = pool(&idle_ending_url(&proxy, &app, 150));
    let duration = run_for();
    let until = Instant::now() + duration;
    let counts = Arc::new(Counts::default());
    let beliefs = Arc::new(Beliefs::default());
    let _load = Load::start(1);

    // Two worker processes, through the same proxy.
    let children: Arc<Mutex<Vec<Child>>> = Arc::default();
    for _ in 0..2 {
        let child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "leases_under_random_faults_never_overlap_and_no_stale_write_lands",
                "--nocapture",
            ])
            .env(CHILD_ENV, "lease-worker")
            .env("DATABASE_URL", &url)
            .env("CHECKER_TABLE", &table)
            .env("CHECKER_LEDGER", &ledger)
            .env("CHECKER_MILLIS", duration.as_millis().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        children.lock().push(child);
    }
    // Six threads: four families of their own (two on the idle-ending pool), and one family shared
    // by two threads that contend for the same keys.
    let family = |db: &Db, owner: &str| {
        Leases::new(db)
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let shared = family(&db, "thread-shared");
    let workers: Vec<_> = (0..6_u64)
        .map(|i| {
            let db = if i % 2 == 1 {
                idle_db.clone()
            } else {
                db.clone()
            };
            let leases = if i >= 4 {
                shared.clone()
            } else {
                family(&db, &format!("thread-{i}"))
            };
            let (ledger, counts, beliefs) = (ledger.clone(), counts.clone(), beliefs.clone());
            thread::spawn(move || lease_worker(&db, &leases, &ledger, i, until, &counts, &beliefs))
        })
        .collect();
    let faults = inject_faults(&proxy, &app, &children, until, 99);
    for worker in workers {
        worker.join().unwrap();
    }
    for mut child in children.lock().drain(..) {
        let out = child.stdout.take().unwrap();
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(stats) = line.find("STATS ").map(|at| &line[at..]) {
                counts.add_line(stats);
            }
        }
        assert!(child.wait().unwrap().success(), "a worker process failed");
    }

    // The proof, from the ledger and the lease rows.
    let proof = ledger::assert_ordered(&ledger);
    let tenures = proof.tenures;
    for (key, token) in &proof.last {
        let row_token: i64 = client()
            .query_one(&format!("SELECT token FROM {table} WHERE key = $1"), &[key])
            .unwrap()
            .get(0);
        assert!(
            row_token >= *token,
            "{key}: the lease row's token {row_token} is behind the ledger's {token}"
        );
    }
    let total_faults: u64 = faults.values().sum();
    println!(
        "lease checker, {duration:?}: {} fenced writes in {tenures} tenures with writes ({} acquisitions), \
         {} stale writes refused, {} writes failed by faults, {} losses seen (noticed by a worker at most {:?} after the deadline, \
         including the write in progress and process pauses), {} belief checks, {} overlapping beliefs, \
         {} statements cancelled that were not a lease's own; {} connections closed after an answer; \
         {total_faults} faults: {faults:?}",
        proof.writes,
        counts.acquired.load(Ordering::SeqCst),
        counts.refused.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
        counts.losses.load(Ordering::SeqCst),
        Duration::from_micros(counts.worst_late_us.load(Ordering::SeqCst)),
        beliefs.checks.load(Ordering::SeqCst),
        beliefs.violations.load(Ordering::SeqCst),
        counts.stray_cancels.load(Ordering::SeqCst),
        proxy.fins(),
    );
    assert_eq!(
        beliefs.violations.load(Ordering::SeqCst),
        0,
        "a lease still said is_held after another lease of its key was granted"
    );
    assert_eq!(
        counts.stray_cancels.load(Ordering::SeqCst),
        0,
        "a deadline cancel hit a statement that was not its own"
    );
    let ambiguous = assert_landed(proof.writes, &counts);
    println!("{ambiguous} commits were ambiguous (cut off after COMMIT) and landed");
    assert!(
        tenures >= 10 && total_faults >= 5,
        "too little happened to prove anything"
    );
    assert!(
        counts.refused.load(Ordering::SeqCst) > 0,
        "no stale write was even attempted"
    );
}

#[test]
fn electors_under_random_faults_never_have_two_leaders_writing() {
    let mut tables = Tables::new();
    let table = tables.name("leader");
    let ledger = ledger::create(&mut tables);
    Elector::new(&common::db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("electors");
    let db = Db::builder(&proxied_url(&proxy, &app))
        .unwrap()
        .connection_timeout(Duration::from_secs(2))
        .unwrap()
        .build()
        .unwrap();
    let duration = run_for();
    let until = Instant::now() + duration;
    let counts = Arc::new(Counts::default());
    let _load = Load::start(2);
    let pollers: Vec<_> = (0..4)
        .map(|i| {
            let (db, table, ledger, counts) =
                (db.clone(), table.clone(), ledger.clone(), counts.clone());
            thread::spawn(move || {
                let holder = format!("elector-{i}");
                let e = Elector::new(&db)
                    .with_table(&table)
                    .unwrap()
                    .with_holder(&holder)
                    .unwrap()
                    .with_ttl(Duration::from_millis(300))
                    .unwrap();
                let mut rng = Rng::new(i);
                while Instant::now() < until {
                    if let (Ok(true), Some(term)) = (e.is_leader(), e.term()) {
                        write(&db, &ledger, "leader", term, &holder, &counts, |tx| {
                            e.fence(tx, term)
                        });
                        if rng.below(20) == 0 {
                            let _ = e.resign();
                        }
                        // Now and then, write again after a stall, possibly past the term.
                        if rng.below(4) == 0 {
                            thread::sleep(rng.millis(0, 400));
                            write(&db, &ledger, "leader", term, &holder, &counts, |tx| {
                                e.fence(tx, term)
                            });
                        }
                    }
                    thread::sleep(rng.millis(20, 80));
                }
            })
        })
        .collect();
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 7);
    for poller in pollers {
        poller.join().unwrap();
    }
    let proof = ledger::assert_ordered(&ledger);
    println!(
        "elector checker, {duration:?}: {} term-fenced writes over {} terms, {} stale writes refused, {} failed by faults; faults: {faults:?}",
        proof.writes,
        proof.tenures,
        counts.refused.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst)
    );
    assert_landed(proof.writes, &counts);
    let changes = proof.tenures.saturating_sub(1);
    assert!(
        changes >= 3,
        "leadership changed hands only {changes} times"
    );
}

#[test]
fn membership_under_random_faults_never_works_a_unit_twice() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&common::db())
        .with_tables(&procs, &units_t)
        .unwrap();
    units.create_tables().unwrap();
    units
        .add(
            &(0..150)
                .map(|i| Unit::new("t", i).unwrap())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("members");
    let url = proxied_url(&proxy, &app);
    let registry = Arc::new(Registry::default());
    let mut config = Config::default();
    config.ttl = Duration::from_millis(900);
    config.heartbeat_interval = Duration::from_millis(200);
    config.rebalance_interval = Duration::from_millis(100);
    config.sweep_cutoff = Duration::from_secs(5);
    let leasers: Vec<Arc<Leaser>> = (0..4)
        .map(|i| {
            let db = Db::builder(&url)
                .unwrap()
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .build_lazy();
            Arc::new(
                Leaser::new(
                    &db,
                    Arc::new(Worker {
                        registry: registry.clone(),
                        id: i,
                        // Well inside the fifth of the TTL a loss has to reach the reconciler.
                        drain_ms: 60,
                    }),
                    config.clone(),
                    Arc::new(NoHooks),
                )
                .unwrap()
                .with_tables(&procs, &units_t)
                .unwrap(),
            )
        })
        .collect();
    for (i, leaser) in leasers.iter().enumerate() {
        registry.watch(i, leaser);
    }
    let mut running: Vec<Running> = leasers.iter().map(|l| Running::start(l.clone())).collect();
    let _load = Load::start(3);
    let duration = run_for();
    let until = Instant::now() + duration;
    // Crash one process half-way through: its units must move after its TTL.
    let crasher = {
        let registry = registry.clone();
        let mut crashing = running.pop().expect("four runners");
        thread::spawn(move || {
            thread::sleep(duration / 2);
            registry.crashed(3);
            crashing.stop();
        })
    };
    let samples = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (leasers, samples, done) = (leasers.clone(), samples.clone(), done.clone());
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                // Local views of live processes never overlap. The views are read one after the
                // other, twice: a unit is owned twice at once when a view held it in both of its
                // reads and another view held it in a read made between those two.
                let reads: Vec<BTreeSet<Unit>> = (0..2)
                    .flat_map(|_| leasers.iter().take(3))
                    .map(|l| l.owned().into_iter().collect())
                    .collect();
                for i in 0..3 {
                    let both = reads[i].intersection(&reads[i + 3]);
                    for unit in both {
                        if let Some(j) = (i + 1..i + 3).find(|j| reads[*j].contains(unit)) {
                            panic!("{unit} owned by {i} and {} at once", j % 3);
                        }
                    }
                }
                samples.fetch_add(1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 3);
    crasher.join().unwrap();
    // Healed: the three survivors own every unit again.
    wait_for(
        "the survivors to own all 150 units",
        Duration::from_secs(15),
        || {
            (leasers
                .iter()
                .take(3)
                .map(|l| l.owned().len())
                .sum::<usize>()
                == 150)
                .then_some(())
        },
    );
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    for run in &mut running {
        run.stop();
    }
    let violations = registry.violations();
    println!(
        "membership checker, {duration:?}: {} ownership samples, {violations} double-worked units; faults: {faults:?}",
        samples.load(Ordering::SeqCst)
    );
    assert_eq!(violations, 0, "a unit was worked on by two processes");
}
