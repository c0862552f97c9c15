//! Parts 1 and 2: tick claims and fire claims.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use pgtenure::{fire_claims::FireClaims, tick_claims::TickClaims, Db};

use crate::clock::{clock, next_boundary, sleep_until};
use crate::INSTANCES;

const TICKS: u32 = 6;
const PERIOD: Duration = Duration::from_millis(250);

/// For each tick, who asked and the token each won (`None`: refused).
type Outcomes = BTreeMap<u32, Vec<(String, Option<i64>)>>;

/// Three instances run the same every-250-ms schedule of one job; each tick runs on one of them.
pub fn tick_claims(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
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
pub fn fire_claims(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
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
