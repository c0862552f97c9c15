//! Semaphores under faults: worker threads and processes contend for the permits of a few keys
//! (N = 2 or 3) with short TTLs; every holder writes to a ledger through its permit's fence, the
//! ledger keyed by key and slot. Afterwards: in ledger order each slot's tokens only grew (no stale
//! fenced write landed after a newer tenure of its slot wrote), and no permit was still believed
//! (`is_held`) after another permit of its slot was granted, every slot granted below its key's N:
//! so never more than N believers of a key at once (among the threads of one process). The
//! database's live permits of a key, read at each grant, never exceed N.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::crossbeam_channel::{after, select};
use pgtenure::semaphores::{Permit, Semaphore};
use pgtenure::Db;

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{ledger, Tables};
use crate::harness::{
    assert_landed, inject_faults, mode, proxied_url, run_for, write, Counts, Load, Rng,
};

const CHILD_ENV: &str = "PGTENURE_CHECKER_CHILD";
/// The keys and their permits.
const KEYS: [(&str, u32); 3] = [("s0", 2), ("s1", 3), ("s2", 2)];

/// A key and one of its slots.
type Slot = (String, u32);

/// Who believes each slot, since when: a permit still held after another permit of its slot was
/// registered is a violation (as `common::beliefs` for leases), and so is a slot at or above N.
#[derive(Default)]
struct Slots {
    /// By (key, slot): the registered permit, when, and its token.
    current: Mutex<BTreeMap<Slot, (u64, Instant, i64)>>,
    next: AtomicU64,
    checks: AtomicU64,
    violations: AtomicU64,
}

impl Slots {
    /// Registers a permit just granted, if still held (checked under the lock).
    fn granted(&self, permit: &Permit) -> u64 {
        let me = self.next.fetch_add(1, Ordering::SeqCst);
        if permit.slot() >= permit.permits() {
            self.violation(permit, "granted a slot at or above its N".into());
        }
        let mut current = self.current.lock();
        if permit.is_held() {
            let slot = (permit.key().to_owned(), permit.slot());
            current.insert(slot, (me, Instant::now(), permit.token()));
        }
        me
    }

    /// Counts a violation when `permit` (registered as `me`) is still held after another permit of
    /// its slot was registered.
    fn check(&self, me: u64, permit: &Permit) {
        let at = Instant::now();
        if !permit.is_held() {
            return;
        }
        self.checks.fetch_add(1, Ordering::Relaxed);
        let slot = (permit.key().to_owned(), permit.slot());
        let current = self.current.lock().get(&slot).copied();
        if let Some((other, since, token)) = current {
            if other != me && since < at {
                let what = format!(
                    "still held {:?} after token {token} took the slot",
                    at - since
                );
                self.violation(permit, what);
            }
        }
    }

    fn violation(&self, permit: &Permit, what: String) {
        self.violations.fetch_add(1, Ordering::SeqCst);
        eprintln!("{permit:?}: {what}");
    }
}

/// The live permits of `key` in the database, when the read gets through.
fn live(semaphore: &Semaphore, key: &str) -> Option<usize> {
    semaphore.holders(key).ok().map(|holders| holders.len())
}

/// The worker loop, in a thread or a child process.
fn worker(
    db: &Db,
    semaphore: &Semaphore,
    ledger: &str,
    seed: u64,
    until: Instant,
    counts: &Counts,
    slots: &Slots,
) {
    let owner = semaphore.owner().to_owned();
    let mut rng = Rng::new(seed);
    while Instant::now() < until {
        let (key, permits) = KEYS[rng.below(KEYS.len() as u64) as usize];
        let ttl = rng.millis(100, 500);
        let writes = 1 + rng.below(8);
        let held = semaphore.with_permit(key, permits, ttl, |permit| {
            counts.acquired.fetch_add(1, Ordering::SeqCst);
            let me = slots.granted(permit);
            if live(semaphore, key).is_some_and(|n| n > permits as usize) {
                slots.violation(permit, "more live permits than N in the database".into());
            }
            // The ledger's key is the key and the slot: each slot's tokens must only grow.
            let slot_key = format!("{key}/{}", permit.slot());
            for _ in 0..writes {
                slots.check(me, permit);
                if !permit.is_held() {
                    break;
                }
                write(
                    db,
                    ledger,
                    &slot_key,
                    permit.token(),
                    &owner,
                    counts,
                    |tx| permit.fence(tx),
                );
                slots.check(me, permit);
                select! {
                    recv(permit.lost()) -> _ => {
                        counts.losses.fetch_add(1, Ordering::SeqCst);
                        break;
                    }
                    recv(after(Duration::from_millis(20))) -> _ => {}
                }
            }
            slots.check(me, permit);
        });
        if let Err(e) = held {
            counts.stray_cancel(e.code(), "an operation without a cancel key", &e);
        }
        // Real time is the subject: the worker's pace, 0-30 ms between tries.
        thread::sleep(rng.millis(0, 30));
    }
}

fn child_worker() {
    let env = |k: &str| std::env::var(k).unwrap();
    let counts = Counts::default();
    let until = Instant::now() + Duration::from_millis(env("CHECKER_MILLIS").parse().unwrap());
    let db = crate::common::db();
    let semaphore = Semaphore::new(&db)
        .with_table(&env("CHECKER_TABLE"))
        .unwrap()
        .with_owner(&format!("process-{}", std::process::id()))
        .unwrap();
    let slots = Slots::default();
    let ledger = env("CHECKER_LEDGER");
    worker(&db, &semaphore, &ledger, 11, until, &counts, &slots);
    assert_eq!(slots.violations.load(Ordering::SeqCst), 0, "a violation");
    println!("{}", counts.line());
}

#[test]
fn semaphores_under_random_faults_never_exceed_n_and_no_stale_write_lands() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "semaphore-worker") {
        child_worker();
        return;
    }
    let mut tables = Tables::new();
    let table = tables.name("sema");
    let ledger = ledger::create(&mut tables);
    Semaphore::new(&crate::common::db())
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
        .statement_mode(mode(0))
        .build()
        .unwrap();
    let duration = run_for();
    let until = Instant::now() + duration;
    let counts = Arc::new(Counts::default());
    let slots = Arc::new(Slots::default());
    let _load = Load::start(3);

    // One worker process through the same proxy (paused now and then), and five threads: more
    // contenders than the permits of any key.
    let children: Arc<Mutex<Vec<Child>>> = Arc::default();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "semaphores::semaphores_under_random_faults_never_exceed_n_and_no_stale_write_lands",
            "--nocapture",
        ])
        .env(CHILD_ENV, "semaphore-worker")
        .env("DATABASE_URL", &url)
        .env("CHECKER_TABLE", &table)
        .env("CHECKER_LEDGER", &ledger)
        .env("CHECKER_MILLIS", duration.as_millis().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    children.lock().push(child);
    let workers: Vec<_> = (0..5_u64)
        .map(|i| {
            let semaphore = Semaphore::new(&db)
                .with_table(&table)
                .unwrap()
                .with_owner(&format!("thread-{i}"))
                .unwrap();
            let (db, ledger, counts, slots) =
                (db.clone(), ledger.clone(), counts.clone(), slots.clone());
            thread::spawn(move || worker(&db, &semaphore, &ledger, i, until, &counts, &slots))
        })
        .collect();
    let faults = inject_faults(&proxy, &app, &children, until, 37);
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

    // The proof, from the ledger: per slot, tokens only grew and each token had one owner.
    let proof = ledger::assert_ordered(&ledger);
    let total_faults: u64 = faults.values().sum();
    println!(
        "semaphore checker, {duration:?}: {} fenced writes in {} tenures with writes ({} \
         permits), {} stale writes refused, {} writes failed by faults, {} losses seen, {} belief \
         checks, {} violations; {total_faults} faults: {faults:?}",
        proof.writes,
        proof.tenures,
        counts.acquired.load(Ordering::SeqCst),
        counts.refused.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
        counts.losses.load(Ordering::SeqCst),
        slots.checks.load(Ordering::SeqCst),
        slots.violations.load(Ordering::SeqCst),
    );
    assert_eq!(
        slots.violations.load(Ordering::SeqCst),
        0,
        "a permit above N, two believers of one slot, or more than N live permits"
    );
    assert_landed(proof.writes, &counts);
    assert!(
        proof.tenures >= 10 && total_faults >= 5,
        "too little happened to prove anything"
    );
    // More than N tenures of some key wrote: the cap was contended.
    assert!(
        proof.last.len() >= 4,
        "fewer than four slots ever wrote: {:?}",
        proof.last
    );
}
