//! A tour of pgtenure: three instances of one application coordinate through PostgreSQL.
//!
//! Run it with `cargo run --example tour`. It uses `DATABASE_URL` when set (and creates pgtenure's
//! default tables there), else a throwaway server it starts and removes. Its five parts:
//!
//! 1. Tick claims: three instances ask for every tick of one job; each tick runs once, and a late
//!    instance's old tick and a fast clock's future tick are refused.
//! 2. Fire claims: each fire, asked for by every instance, is won once; a live claim is refused to
//!    its own holder too; expired claims are purged.
//! 3. Keyed leases: one holder at a time, writes fenced by the tenure's token; a holder in another
//!    process is killed and its lease taken over after the TTL, and its late write refused.
//! 4. Leader election: three electors, terms that only grow, a resignation handed over at the next
//!    poll and a crashed leader replaced after its TTL.
//! 5. Membership: 48 units shared fairly by the live processes as one joins and another crashes.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use parking_lot::Mutex;
use pgtenure::membership::{Config, Leaser, NoHooks, Reconciler, Unit, Units};
use pgtenure::{Db, Elector, FireClaims, Leases, TickClaims};

const INSTANCES: [&str; 3] = ["instance-a", "instance-b", "instance-c"];
/// Set in the child process that holds a lease until it is killed.
const CHILD_ENV: &str = "PGTENURE_TOUR_HOLD";
const LEASE_TTL: Duration = Duration::from_millis(900);
const TICKS: u32 = 6;
const PERIOD: Duration = Duration::from_millis(250);

/// For each tick, who asked and the token each won (`None`: refused).
type Outcomes = BTreeMap<u32, Vec<(String, Option<i64>)>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(key) = std::env::var_os(CHILD_ENV) {
        return hold_until_killed(&key.to_string_lossy());
    }
    let from_env = std::env::var("DATABASE_URL").is_ok_and(|u| !u.trim().is_empty());
    let url = pgtenure::testing::database_url()?;
    let db = Db::connect(&url)?;
    pgtenure::migrate(&db)?;
    println!("pgtenure tour");
    println!(
        "database: {}\n",
        if from_env {
            "DATABASE_URL"
        } else {
            "a throwaway PostgreSQL server (set DATABASE_URL to use yours)"
        }
    );

    tick_claims(&db)?;
    fire_claims(&db)?;
    leases(&db, &url)?;
    election(&db)?;
    membership(&db)?;
    Ok(())
}

/// Three instances run the same every-250-ms schedule of one job; each tick runs on one of them.
fn tick_claims(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "1. Tick claims: job \"rollup\" every {PERIOD:?}, {TICKS} ticks, three instances racing"
    );
    let job = format!("rollup-{}", std::process::id());
    let first = next_boundary(PERIOD) + PERIOD;
    let outcomes: Arc<Mutex<Outcomes>> = Arc::default();
    let barrier = Arc::new(Barrier::new(INSTANCES.len()));
    let handles: Vec<_> = INSTANCES
        .iter()
        .map(|name| {
            let claims = TickClaims::new(db).with_owner(name)?;
            let (job, outcomes, barrier) = (job.clone(), outcomes.clone(), barrier.clone());
            Ok(thread::spawn(move || -> Result<(), pgtenure::Error> {
                barrier.wait();
                for n in 0..TICKS {
                    let tick = first + PERIOD * n;
                    sleep_until(tick);
                    let claim = claims.claim(&job, tick, PERIOD)?;
                    let token = claim.as_ref().map(|c| c.token());
                    outcomes
                        .lock()
                        .entry(n)
                        .or_default()
                        .push((claims.owner().to_owned(), token));
                    if let Some(claim) = claim {
                        thread::sleep(Duration::from_millis(30)); // the job's work
                        claim.release()?;
                    }
                }
                Ok(())
            }))
        })
        .collect::<Result<_, pgtenure::Error>>()?;
    for handle in handles {
        handle.join().expect("instance thread")?;
    }

    let mut runs = 0;
    for (n, tried) in outcomes.lock().iter() {
        let winners: Vec<_> = tried.iter().filter(|(_, t)| t.is_some()).collect();
        let refused: Vec<_> = tried
            .iter()
            .filter(|(_, t)| t.is_none())
            .map(|(o, _)| o.as_str())
            .collect();
        runs += winners.len();
        let (who, token) = winners
            .first()
            .map_or(("nobody", 0), |(o, t)| (o.as_str(), t.unwrap_or(0)));
        println!(
            "   tick {} at {}  ran on {who:<10} (token {token})  refused: {}",
            n + 1,
            clock(first + PERIOD * *n),
            refused.join(", ")
        );
        assert_eq!(winners.len(), 1, "tick {n} ran {} times", winners.len());
    }
    println!("   {TICKS} ticks, {runs} runs: every tick ran exactly once");

    // An instance that was paused asks for an old tick: refused, it cannot run it again.
    let late = TickClaims::new(db).with_owner("instance-late")?;
    let again = late.claim(&job, first, PERIOD)?;
    println!(
        "   a late instance asks for tick 1 again: {}",
        if again.is_some() {
            "GRANTED (bug)"
        } else {
            "refused"
        }
    );
    // An instance whose clock runs five minutes ahead cannot claim the future.
    let skewed = late.claim(&job, SystemTime::now() + Duration::from_secs(300), PERIOD);
    match skewed {
        Err(e) if e.is_invalid_input() => {
            println!("   a clock five minutes ahead is refused: {e}\n")
        }
        other => println!("   a clock five minutes ahead: unexpected {other:?}\n"),
    }
    Ok(())
}

/// Three instances compute the same fire keys; each fire is won once and held for its TTL.
fn fire_claims(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    println!("2. Fire claims: three fires of job \"digest\", TTL 2 s, three instances racing");
    let base = next_boundary(Duration::from_secs(1));
    let keys: Vec<String> = (0..3u32)
        .map(|i| {
            let at = base + Duration::from_secs(60) * i;
            format!(
                "digest-{}@{}",
                std::process::id(),
                at.duration_since(UNIX_EPOCH).unwrap().as_nanos()
            )
        })
        .collect();
    let barrier = Arc::new(Barrier::new(INSTANCES.len()));
    let handles: Vec<_> = INSTANCES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let fires = FireClaims::new(db)
                .with_owner(name)?
                .with_ttl(Duration::from_secs(2))?;
            let (keys, barrier) = (keys.clone(), barrier.clone());
            Ok(thread::spawn(
                move || -> Result<Vec<bool>, pgtenure::Error> {
                    // The three schedulers fire each key at the same moment, give or take a few
                    // milliseconds of jitter.
                    let jitter =
                        |k: usize| Duration::from_millis(((i * 7 + k * 11) % 5) as u64 * 3);
                    let mut won = Vec::with_capacity(keys.len());
                    for (k, key) in keys.iter().enumerate() {
                        barrier.wait();
                        thread::sleep(jitter(k));
                        won.push(fires.claim(key)?);
                    }
                    Ok(won)
                },
            ))
        })
        .collect::<Result<_, pgtenure::Error>>()?;
    let results: Vec<Vec<bool>> = handles
        .into_iter()
        .map(|h| h.join().expect("instance thread"))
        .collect::<Result<_, _>>()?;
    for (i, key) in keys.iter().enumerate() {
        let winners: Vec<&str> = INSTANCES
            .iter()
            .zip(&results)
            .filter(|(_, won)| won[i])
            .map(|(name, _)| *name)
            .collect();
        println!("   {key:<40} won by {}", winners.join(", "));
        assert_eq!(winners.len(), 1);
    }
    let fires = FireClaims::new(db).with_owner("instance-a")?;
    println!(
        "   instance-a claims {} again while it is live: {}",
        keys[0],
        if fires.claim(&keys[0])? {
            "won (bug)"
        } else {
            "refused"
        }
    );
    let purged = fires.purge(Duration::from_secs(60))?;
    println!("   purge of claims expired over a minute ago: {purged} deleted");
    Ok(())
}

/// Three instances take turns on a keyed lease; its holder process is killed; a fencing token keeps
/// the dead holder's writes out.
fn leases(db: &Db, url: &str) -> Result<(), Box<dyn std::error::Error>> {
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
fn hold_until_killed(key: &str) -> Result<(), Box<dyn std::error::Error>> {
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
        db.pool().get()?.batch_execute(Self::CREATE)?;
        Ok(Ledger { db: db.clone() })
    }

    /// One protected write: fence, then write, in one transaction.
    fn write(&self, leases: &Leases, key: &str, token: i64) -> Result<bool, pgtenure::Error> {
        let mut conn = self.db.pool().get().expect("a pooled connection");
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
        db.pool().get()?.batch_execute(Self::DROP)?;
        Ok(())
    }
}

/// Three electors poll; the leader resigns and the hand-over is immediate; then it crashes.
fn election(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_secs(1);
    println!("\n4. Leader election: three electors poll every 100 ms, TTL {ttl:?}");
    let fleet = format!("tour-{}", std::process::id());
    let electors: Vec<Elector> = INSTANCES
        .iter()
        .map(|name| {
            Elector::new(db)
                .with_name(&fleet)?
                .with_holder(name)?
                .with_ttl(ttl)
        })
        .collect::<Result<_, _>>()?;
    let poll = |skip: Option<usize>| -> Result<Option<usize>, pgtenure::Error> {
        let mut leader = None;
        for (i, e) in electors.iter().enumerate() {
            if Some(i) != skip && e.is_leader()? {
                leader = Some(i);
            }
        }
        Ok(leader)
    };
    let first = poll(None)?.ok_or("nobody leads")?;
    let info = electors[0].leader()?.ok_or("nobody leads")?;
    println!("   {} leads with term {}", info.holder, info.term);
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            poll(None)?,
            Some(first),
            "leadership is stable while polled"
        );
    }
    println!(
        "   three more polls: still {} (term {})",
        INSTANCES[first],
        term(&electors[first])
    );

    electors[first].resign()?;
    let resigned = Instant::now();
    let next = poll(Some(first))?.ok_or("nobody took over")?;
    println!(
        "   {} resigns; on the next poll {} leads with term {}, {:.1?} later",
        INSTANCES[first],
        INSTANCES[next],
        term(&electors[next]),
        resigned.elapsed()
    );

    // The new leader stops polling, as a crashed process would: the others wait out its TTL.
    let crashed = Instant::now();
    let third = loop {
        thread::sleep(Duration::from_millis(100));
        if let Some(i) = poll(Some(next))? {
            break i;
        }
    };
    println!(
        "   {} stops polling (crash); {} leads with term {} after {:?} (TTL {ttl:?})",
        INSTANCES[next],
        INSTANCES[third],
        term(&electors[third]),
        round_ms(crashed.elapsed())
    );
    electors[third].resign()?;
    Ok(())
}

/// The tour's reconciler: it only counts.
struct Quiet;

impl Reconciler for Quiet {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, _: &[Unit]) {}
}

/// Processes share (tenant, shard) units; one joins, one crashes; each round converges to fair share.
fn membership(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_secs(1);
    println!("\n5. Membership: 48 units (4 tenants x 12 shards), fair share among live processes, TTL {ttl:?}");
    let (processes, units_table) = (
        format!("pgtenure_tour_processes_{}", std::process::id()),
        format!("pgtenure_tour_units_{}", std::process::id()),
    );
    let units = Units::new(db).with_tables(&processes, &units_table)?;
    units.create_tables()?;
    let all: Vec<Unit> = ["acme", "globex", "initech", "umbrella"]
        .iter()
        .flat_map(|t| (0..12).map(move |s| Unit::new(t, s)))
        .collect::<Result<_, _>>()?;
    units.add(&all)?;
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = ttl / 4;
    let leasers: Vec<Leaser> = (0..4)
        .map(|_| {
            Leaser::new(db, Arc::new(Quiet), config.clone(), Arc::new(NoHooks))?
                .with_tables(&processes, &units_table)
        })
        .collect::<Result<_, _>>()?;
    println!(
        "   {:<26} {:>4} {:>4} {:>4} {:>4}   fair share",
        "round", "p1", "p2", "p3", "p4"
    );
    let mut alive = [true, true, true, false];
    let show = |label: &str, alive: &[bool; 4]| -> Result<(), pgtenure::Error> {
        let mut fair = 0;
        for (leaser, _) in leasers.iter().zip(alive).filter(|(_, a)| **a) {
            leaser.heartbeat()?;
            fair = leaser.tick()?.fair_share;
        }
        let cells: Vec<String> = leasers
            .iter()
            .zip(alive)
            .map(|(l, a)| {
                if *a {
                    l.owned().len().to_string()
                } else {
                    "-".to_owned()
                }
            })
            .collect();
        println!(
            "   {label:<26} {:>4} {:>4} {:>4} {:>4}   {fair}",
            cells[0], cells[1], cells[2], cells[3]
        );
        Ok(())
    };
    for leaser in &leasers[..3] {
        leaser.heartbeat()?; // three processes are up
    }
    show("1: three processes", &alive)?;
    show("2", &alive)?;
    alive[3] = true;
    show("3: p4 joins", &alive)?;
    show("4", &alive)?;
    alive[1] = false;
    let crashed = Instant::now();
    show("5: p2 crashes (silent)", &alive)?;
    let mut round = 6;
    while crashed.elapsed() < ttl + ttl / 2 {
        thread::sleep(ttl / 2);
        show(
            &format!("{round}: {:.1?} after the crash", crashed.elapsed()),
            &alive,
        )?;
        round += 1;
    }
    let owned: usize = leasers
        .iter()
        .zip(&alive)
        .filter(|(_, a)| **a)
        .map(|(l, _)| l.owned().len())
        .sum();
    println!(
        "   the three live processes own {owned} of 48 units; p2's were claimed after its TTL"
    );
    for (leaser, _) in leasers.iter().zip(&alive).filter(|(_, a)| **a) {
        leaser.release()?;
        leaser.delete_process()?;
    }
    db.pool()
        .get()?
        .batch_execute(&format!("DROP TABLE {processes}; DROP TABLE {units_table}"))?;
    Ok(())
}

fn term(elector: &Elector) -> String {
    elector
        .term()
        .map_or_else(|| "none".to_owned(), |t| t.to_string())
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// The next multiple of `period` since the Unix epoch, by this machine's clock (the schedule).
fn next_boundary(period: Duration) -> SystemTime {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let period_ns = period.as_nanos();
    let next = (now.as_nanos() / period_ns + 1) * period_ns;
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(next).unwrap())
}

fn sleep_until(at: SystemTime) {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        thread::sleep(wait);
    }
}

/// `HH:MM:SS.mmm` in UTC.
fn clock(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap();
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_millis()
    )
}
