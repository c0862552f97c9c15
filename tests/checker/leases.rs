//! Leases under faults: worker threads and processes contend for a few keys with short TTLs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::crossbeam_channel::{after, select};
use pgtenure::{
    leases::{LeaseLoss, Leases},
    Db,
};

use crate::common::beliefs::Beliefs;
use crate::common::proxy::{database_addr, Proxy};
use crate::common::{client, ledger, Tables};
use crate::harness::{
    assert_landed, idle_ending_url, inject_faults, mode, proxied_url, run_for, write, Counts, Load,
    Rng,
};

const CHILD_ENV: &str = "PGTENURE_CHECKER_CHILD";
const KEYS: [&str; 3] = ["k0", "k1", "k2"];

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
                    write(db, ledger, key, lease.token(), owner, counts, |tx| lease.fence(tx));
                    beliefs.check(key, me, lease);
                    select! {
                        recv(lease.lost()) -> reason => {
                            counts.losses.fetch_add(1, Ordering::SeqCst);
                            if reason == Ok(LeaseLoss::Expired) {
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
                        // Real time is the subject: a holder's fenced write every 25 ms.
                        thread::sleep(Duration::from_millis(25));
                    }
                }
                Ok(None) => {}
                Err(e) => stray(&e),
            }
        }
        // Real time is the subject: the worker's pace, 0-30 ms between tries.
        thread::sleep(rng.millis(0, 30));
    }
}

#[test]
fn leases_under_random_faults_never_overlap_and_no_stale_write_lands() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "lease-worker") {
        let env = |k: &str| std::env::var(k).unwrap();
        let counts = Counts::default();
        let until = Instant::now() + Duration::from_millis(env("CHECKER_MILLIS").parse().unwrap());
        let owner = format!("process-{}", std::process::id());
        let db = crate::common::db();
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
    Leases::new(&crate::common::db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("checker");
    let url = proxied_url(&proxy, &app);
    let pool = |url: &str, i: usize| {
        Db::builder(url)
            .unwrap()
            .connection_timeout(Duration::from_secs(2))
            .unwrap()
            .statement_mode(mode(i))
            .build()
            .unwrap()
    };
    // Protocol-level statements here, SQL-level on the second pool, whose idle sessions the
    // server ends after 150 ms.
    let db = pool(&url, 0);
    let idle_db = pool(&idle_ending_url(&proxy, &app, 150), 1);
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
                "leases::leases_under_random_faults_never_overlap_and_no_stale_write_lands",
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
