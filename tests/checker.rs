//! The mutual-exclusion checker: many workers (threads and separate processes) contend for a few
//! keys with short TTLs while faults are injected at random; every tenure writes to a ledger through
//! a fence. Afterwards the ledger and the lease rows must prove that no two tenures of a key
//! overlapped, tokens only grew in ledger order, and no write by a token landed after a higher token
//! wrote. The same for the elector (term-fenced writes) and for membership (no unit worked on by two
//! processes at once).
//!
//! Length: `PGTENURE_CHECKER_SECS` seconds (default 20), e.g. an hour:
//! `PGTENURE_CHECKER_SECS=3600 cargo test --release --test checker -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::proxy::{database_addr, Proxy};
use common::registry::{Registry, Worker};
use common::{client, ledger, wait_for, Running, Tables};
use parking_lot::Mutex;
use pgtenure::crossbeam_channel::{after, select};
use pgtenure::membership::{Config, Hooks, Leaser, Unit, Units};
use pgtenure::{Db, Elector, Leases, LossReason};

const CHILD_ENV: &str = "PGTENURE_CHECKER_CHILD";
const KEYS: [&str; 3] = ["k0", "k1", "k2"];

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

/// What a worker did.
#[derive(Debug, Default)]
struct Counts {
    written: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    acquired: AtomicU64,
    losses: AtomicU64,
    worst_late_us: AtomicU64,
}

impl Counts {
    fn line(&self) -> String {
        format!(
            "STATS {} {} {} {} {} {}",
            self.written.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.acquired.load(Ordering::SeqCst),
            self.losses.load(Ordering::SeqCst),
            self.worst_late_us.load(Ordering::SeqCst)
        )
    }

    fn add_line(&self, line: &str) {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|s| s.parse().ok())
            .collect();
        if let [w, r, f, a, l, late] = v[..] {
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
    let outcome = (|| -> Option<bool> {
        let mut conn = db.pool().get().ok()?;
        let mut tx = conn.transaction().ok()?;
        if !fence(&mut tx).ok()? {
            return Some(false);
        }
        let insert = format!("INSERT INTO {ledger} (key, token, owner) VALUES ($1, $2, $3)");
        tx.execute(&insert, &[&key, &token, &owner]).ok()?;
        tx.commit().ok()?;
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

/// The lease worker loop, in a thread or a child process.
fn lease_worker(
    db: &Db,
    table: &str,
    ledger: &str,
    owner: &str,
    seed: u64,
    until: Instant,
    counts: &Counts,
) {
    let leases = Leases::new(db)
        .with_table(table)
        .unwrap()
        .with_owner(owner)
        .unwrap();
    let mut rng = Rng::new(seed);
    while Instant::now() < until {
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let ttl = rng.millis(100, 500);
        if rng.below(3) > 0 {
            // Managed: write while held, watch the loss channel between writes.
            let writes = 1 + rng.below(8);
            let held = leases.with_lease(key, ttl, |lease| {
                counts.acquired.fetch_add(1, Ordering::SeqCst);
                for _ in 0..writes {
                    if !lease.is_held() {
                        break;
                    }
                    write(db, ledger, key, lease.token(), owner, counts, |tx| leases.fence(tx, key, lease.token()));
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
            });
            let _ = held;
        } else if let Ok(Some(grant)) = leases.try_acquire(key, ttl) {
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
        let kind = match rng.below(5) {
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
    faults
}

#[test]
fn leases_under_random_faults_never_overlap_and_no_stale_write_lands() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "lease-worker") {
        let env = |k: &str| std::env::var(k).unwrap();
        let counts = Counts::default();
        let until = Instant::now() + Duration::from_millis(env("CHECKER_MILLIS").parse().unwrap());
        let owner = format!("process-{}", std::process::id());
        lease_worker(
            &common::db(),
            &env("CHECKER_TABLE"),
            &env("CHECKER_LEDGER"),
            &owner,
            7,
            until,
            &counts,
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
    let db = Db::builder(&url)
        .unwrap()
        .connection_timeout(Duration::from_secs(2))
        .unwrap()
        .build()
        .unwrap();
    let duration = run_for();
    let until = Instant::now() + duration;
    let counts = Arc::new(Counts::default());

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
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let (db, table, ledger, counts) =
                (db.clone(), table.clone(), ledger.clone(), counts.clone());
            thread::spawn(move || {
                lease_worker(
                    &db,
                    &table,
                    &ledger,
                    &format!("thread-{i}"),
                    i,
                    until,
                    &counts,
                )
            })
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
         including the write in progress and process pauses); {total_faults} faults: {faults:?}",
        proof.writes,
        counts.acquired.load(Ordering::SeqCst),
        counts.refused.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
        counts.losses.load(Ordering::SeqCst),
        Duration::from_micros(counts.worst_late_us.load(Ordering::SeqCst)),
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
                    }),
                    config.clone(),
                    Hooks::default(),
                )
                .unwrap()
                .with_tables(&procs, &units_t)
                .unwrap(),
            )
        })
        .collect();
    let mut running: Vec<Running> = leasers.iter().map(|l| Running::start(l.clone())).collect();
    let duration = run_for();
    let until = Instant::now() + duration;
    // Crash one process half-way through: its units must move after its TTL.
    let crasher = {
        let registry = registry.clone();
        let mut crashing = running.pop().expect("four runners");
        thread::spawn(move || {
            thread::sleep(duration / 2);
            crashing.stop();
            registry.crashed(3);
        })
    };
    let samples = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (leasers, samples, done) = (leasers.clone(), samples.clone(), done.clone());
        thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                // Local views of live processes never overlap.
                let mut seen = BTreeMap::new();
                for (i, leaser) in leasers.iter().enumerate().take(3) {
                    for unit in leaser.owned() {
                        if let Some(other) = seen.insert(unit.clone(), i) {
                            panic!("{unit} owned by {i} and {other} at once");
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
