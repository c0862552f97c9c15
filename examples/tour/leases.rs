//! Part 3: keyed leases, fenced writes, and a holder process killed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::{leases::Leases, Db};

use crate::clock::round_ms;
use crate::INSTANCES;

/// Set in the child process that holds a lease until it is killed.
pub const CHILD_ENV: &str = "PGTENURE_TOUR_HOLD";
const LEASE_TTL: Duration = Duration::from_millis(900);

/// Three instances take turns on a keyed lease; its holder process is killed; a fencing token keeps
/// the dead holder's writes out.
pub fn leases(db: &Db, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n3. Keyed leases: \"export\", TTL {LEASE_TTL:?}, writes fenced by token");
    let key = format!("export-{}", std::process::id());
    let ledger = Ledger::create(db)?;
    let ran: Arc<Mutex<Vec<String>>> = Arc::default();
    let barrier = Arc::new(Barrier::new(INSTANCES.len()));
    let handles: Vec<_> = INSTANCES
        .iter()
        .map(|name| {
            let leases = Leases::new(db).with_owner(name)?;
            let (key, ledger, ran, barrier) =
                (key.clone(), ledger.clone(), ran.clone(), barrier.clone());
            Ok(thread::spawn(move || -> Result<(), pgtenure::Error> {
                barrier.wait();
                let outcome = leases.with_lease(&key, LEASE_TTL, |lease| {
                    let written = (0..3).filter(|_| {
                        thread::sleep(Duration::from_millis(100));
                        ledger
                            .write(&leases, lease.key(), lease.token())
                            .unwrap_or(false)
                    });
                    format!(
                        "ran with token {}, {} fenced writes",
                        lease.token(),
                        written.count()
                    )
                })?;
                let line =
                    outcome.unwrap_or_else(|| "skipped: the lease is held elsewhere".to_owned());
                ran.lock()
                    .push(format!("   {:<10}  {line}", leases.owner()));
                Ok(())
            }))
        })
        .collect::<Result<_, pgtenure::Error>>()?;
    for handle in handles {
        handle.join().expect("instance thread")?;
    }
    for line in ran.lock().iter() {
        println!("{line}");
    }

    // A holder in another process, killed while it holds the lease.
    let mut child = Command::new(std::env::current_exe()?)
        .env(CHILD_ENV, &key)
        .env("DATABASE_URL", url)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    let (owner, token) = line
        .trim()
        .split_once(' ')
        .ok_or("the child did not report its lease")?;
    let token: i64 = token.parse()?;
    println!(
        "   process {} ({owner}) holds the lease with token {token}, renewing it",
        child.id()
    );
    child.kill()?;
    child.wait()?;
    let killed = Instant::now();
    println!("   process {} killed with SIGKILL mid-lease", child.id());

    let survivor = Leases::new(db).with_owner("instance-c")?;
    let lease = loop {
        if let Some(lease) = survivor.acquire(&key, LEASE_TTL)? {
            break lease;
        }
        thread::sleep(Duration::from_millis(50));
    };
    println!(
        "   instance-c took over {:?} after the kill, with token {} (> {token})",
        round_ms(killed.elapsed()),
        lease.token()
    );
    let wrote = ledger.write(&survivor, lease.key(), lease.token())?;
    println!(
        "   instance-c's fenced write: {}",
        if wrote { "accepted" } else { "REFUSED (bug)" }
    );
    // Had the killed process only been paused, its late write would carry its old token.
    let zombie = Leases::new(db).with_owner(owner)?;
    let stale = ledger.write(&zombie, &key, token)?;
    println!(
        "   a late write with the dead holder's token {token}: {}",
        if stale {
            "ACCEPTED (bug)"
        } else {
            "refused by the fence"
        }
    );
    lease.release()?;
    ledger.drop_table(db)?;
    Ok(())
}

/// The child process: hold the lease and renew it until killed.
pub fn hold_until_killed(key: &str) -> Result<(), Box<dyn std::error::Error>> {
    let db = Db::connect(&std::env::var("DATABASE_URL")?)?;
    let leases = Leases::new(&db).with_owner(&format!("pid-{}", std::process::id()))?;
    let lease = leases
        .acquire(key, LEASE_TTL)?
        .ok_or("the lease was not free")?;
    println!("{} {}", leases.owner(), lease.token());
    // Renewing until SIGKILL; never reached otherwise.
    let _ = lease.lost().recv_timeout(Duration::from_secs(60));
    Ok(())
}

/// A table of fenced writes, for the tour only (dropped at its end).
#[derive(Clone)]
struct Ledger {
    db: Db,
}

impl Ledger {
    const CREATE: &'static str =
        "CREATE TABLE IF NOT EXISTS pgtenure_tour_ledger (token bigint, at timestamptz)";
    const WRITE: &'static str = "INSERT INTO pgtenure_tour_ledger VALUES ($1, clock_timestamp())";
    const DROP: &'static str = "DROP TABLE IF EXISTS pgtenure_tour_ledger";

    fn create(db: &Db) -> Result<Ledger, Box<dyn std::error::Error>> {
        db.connection()?.batch_execute(Self::CREATE)?;
        Ok(Ledger { db: db.clone() })
    }

    /// One protected write: fence, then write, in one transaction.
    fn write(&self, leases: &Leases, key: &str, token: i64) -> Result<bool, pgtenure::Error> {
        let mut conn = self.db.connection().expect("a pooled connection");
        let mut tx = conn.transaction().expect("a transaction");
        if !leases.fence(&mut tx, key, token)? {
            return Ok(false);
        }
        tx.execute(Self::WRITE, &[&token])
            .expect("the ledger write");
        tx.commit().expect("the commit");
        Ok(true)
    }

    fn drop_table(&self, db: &Db) -> Result<(), Box<dyn std::error::Error>> {
        db.connection()?.batch_execute(Self::DROP)?;
        Ok(())
    }
}
