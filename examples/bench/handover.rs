//! Handover by notification (`DbBuilder::handover_notifications`): the time from a release to a
//! waiting acquire's grant, and from a campaign's `stop` (which resigns) to the next leader's
//! election, `handovers` of each, with and without notifications, and through PgBouncer in
//! transaction mode (where the listener stays off and waiters poll); and what the notification
//! adds to a release.

use std::thread;
use std::time::{Duration, Instant};

use pgtenure::elector::{Elector, LeaderEvent, Leadership};
use pgtenure::leases::Leases;
use pgtenure::Db;
use serde_json::{json, Value};

use super::Error;

/// The waiters' poll period: a wake-up beats it, polling waits for it.
const RETRY: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_secs(2);

fn db(url: &str, notify: bool) -> Result<Db, Error> {
    Ok(Db::builder(url)?
        .max_size(4)?
        .handover_notifications(notify)
        .build()?)
}

/// p50 and p99 of `v` (ms), and the count.
fn summary(v: &mut [f64]) -> Value {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let at = |q: f64| v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)));
    json!({ "count": v.len(), "p50_ms": at(0.5), "p99_ms": at(0.99), "max_ms": v.last() })
}

/// Real time is the subject: a pause at a spread of moments within the waiters' poll period, as
/// a real release would come, and past the waiter's first try.
fn spread(n: usize) {
    thread::sleep(RETRY + RETRY * ((n as u32 * 37) % 100) / 100);
}

/// Release -> waiting acquire granted, `handovers` times.
fn leases(url: &str, table: &str, notify: bool, handovers: usize) -> Result<Value, Error> {
    let (holder_db, waiter_db) = (db(url, notify)?, db(url, notify)?);
    let holder = Leases::new(&holder_db)
        .with_table(table)?
        .with_owner("holder")?;
    let waiter = Leases::new(&waiter_db)
        .with_table(table)?
        .with_owner("waiter")?
        .with_retry_period(RETRY)?;
    let key = format!("handover-{notify}-{}", url.len());
    let mut times = Vec::with_capacity(handovers);
    for n in 0..handovers {
        let held = holder
            .acquire(&key, Duration::from_secs(10))?
            .ok_or("the holder was refused")?;
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.clone());
            thread::spawn(move || {
                let lease = waiter.acquire_waiting(&key, Duration::from_secs(10), TTL * 5);
                (lease, Instant::now())
            })
        };
        spread(n);
        let released = Instant::now();
        held.release()?;
        let (lease, granted) = waiting.join().map_err(|_| "the waiter panicked")?;
        let lease = lease?.ok_or("the waiter was not granted")?;
        times.push(granted.saturating_duration_since(released).as_secs_f64() * 1000.0);
        lease.release()?;
    }
    Ok(summary(&mut times))
}

/// Waits until `to` is told `Elected`; when it was seen.
fn elected(to: &Leadership) -> Result<Instant, Error> {
    let until = Instant::now() + TTL * 5;
    while let Ok(event) = to.events().recv_deadline(until) {
        if matches!(event, LeaderEvent::Elected { .. }) {
            return Ok(Instant::now());
        }
    }
    Err("no member took over".into())
}

/// A leader's `stop` (it resigns) -> the other member elected, `handovers` times.
fn campaigns(url: &str, table: &str, notify: bool, handovers: usize) -> Result<Value, Error> {
    let fleet = format!("handover-{notify}-{}", url.len());
    let electors = [db(url, notify)?, db(url, notify)?]
        .iter()
        .enumerate()
        .map(|(i, db)| -> Result<Elector, Error> {
            Ok(Elector::new(db)
                .with_table(table)?
                .with_name(&fleet)?
                .with_holder(&format!("member-{i}"))?
                .with_ttl(TTL)?
                .with_retry_period(RETRY)?)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut members = [Some(electors[0].campaign()?), Some(electors[1].campaign()?)];
    let mut times = Vec::with_capacity(handovers);
    for n in 0..handovers {
        let leader = members
            .iter()
            .position(|m| m.as_ref().is_some_and(Leadership::is_leading))
            .ok_or("nobody leads")?;
        let other = 1 - leader;
        let follower = members[other].as_ref().ok_or("a member is missing")?;
        while follower.events().try_recv().is_ok() {}
        spread(n);
        let stopped = Instant::now();
        members[leader].take().ok_or("no leader")?.stop()?;
        let at = elected(members[other].as_ref().ok_or("a member is missing")?)?;
        times.push(at.saturating_duration_since(stopped).as_secs_f64() * 1000.0);
        members[leader] = Some(electors[leader].campaign()?);
    }
    for member in members.into_iter().flatten() {
        member.stop()?;
    }
    Ok(summary(&mut times))
}

/// What the notification adds to a release: the mean of `n` raw grant-and-release pairs' release
/// (µs), with and without.
fn release_cost(url: &str, table: &str, n: usize) -> Result<Value, Error> {
    let mean = |notify: bool| -> Result<f64, Error> {
        let db = db(url, notify)?;
        let leases = Leases::new(&db).with_table(table)?.with_owner("cost")?;
        let mut total = Duration::ZERO;
        for i in 0..n {
            let key = format!("cost-{}", i % 16);
            leases.try_acquire(&key, Duration::from_secs(10))?;
            let start = Instant::now();
            leases.release(&key)?;
            total += start.elapsed();
        }
        Ok(total.as_secs_f64() * 1e6 / n as f64)
    };
    // Warmed up first, then each way twice, alternating.
    mean(false)?;
    let (off, on, off2, on2) = (mean(false)?, mean(true)?, mean(false)?, mean(true)?);
    Ok(json!({
        "releases": n, "without_us": (off + off2) / 2.0, "with_notify_us": (on + on2) / 2.0,
    }))
}

/// Every measurement, on `lease_t` and `leader_t`; through `bouncer` too when given.
pub fn run(
    url: &str,
    bouncer: Option<&str>,
    lease_t: &str,
    leader_t: &str,
    handovers: usize,
) -> Result<Value, Error> {
    let mut ways = vec![
        ("direct, polling", url, false),
        ("direct, notified", url, true),
    ];
    if let Some(bouncer) = bouncer {
        ways.push(("PgBouncer, notifications on (polling)", bouncer, true));
    }
    let mut results = json!({ "retry_ms": RETRY.as_millis() as u64, "handovers": handovers });
    for (name, url, notify) in ways {
        let release = leases(url, lease_t, notify, handovers)?;
        let resign = campaigns(url, leader_t, notify, handovers)?;
        println!("handover, {name}: release -> waiting acquire granted {release}; stop -> next leader elected {resign}");
        results[name] = json!({ "release_to_grant": release, "stop_to_elected": resign });
    }
    let cost = release_cost(url, lease_t, 2000)?;
    println!("handover: a release's cost {cost}");
    results["release_cost"] = cost;
    Ok(results)
}
