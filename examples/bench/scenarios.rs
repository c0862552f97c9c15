//! The scenarios beyond the side-by-side table: round trips per operation, the cost of holding
//! managed leases, elector failover, and membership at scale (tick cost by units, convergence, a
//! cold start).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use pgtenure::membership::{Config, Leaser, Unit, Units};
use pgtenure::postgres::Client;
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, Db,
    DbBuilder,
};
use serde_json::{json, Value};

use super::common::{hand_driven, Quiet};
use super::common::{proxy, url};
use super::Error;

/// A steady membership tick's latency at 1,000, 10,000 and `max_units` units (8 processes, one
/// statement: the stats), then convergence of joins, leaves and crashes at each size.
pub fn membership(db: &Db, admin: &mut Client, max_units: i32, secs: f64) -> Result<Value, Error> {
    let id = std::process::id();
    let mut growth = Vec::new();
    let mut convergences = Vec::new();
    let mut sizes: Vec<i32> = [1_000, 10_000, max_units]
        .into_iter()
        .filter(|n| *n <= max_units)
        .collect();
    sizes.dedup();
    for (n, units_count) in sizes.iter().enumerate() {
        let (procs_t, units_t) = (
            format!("bench_procs_{id}_{n}"),
            format!("bench_units_{id}_{n}"),
        );
        let units = Units::new(db).with_tables(&procs_t, &units_t)?;
        units.create_tables()?;
        let all: Vec<Unit> = (0..*units_count)
            .map(|i| Unit::new(&format!("tenant-{}", i % 50), i).unwrap())
            .collect();
        for chunk in all.chunks(50_000) {
            units.add(chunk)?;
        }
        admin.batch_execute(&format!("ANALYZE \"{units_t}\""))?;
        let mut config = hand_driven();
        config.ttl = Duration::from_secs(120);
        config.heartbeat_interval = Duration::from_secs(30);
        config.max_claim_per_tick = 100_000;
        let leasers: Vec<Leaser> = (0..8)
            .map(|_| {
                Leaser::new(db, Arc::new(Quiet), config.clone())
                    .unwrap()
                    .with_tables(&procs_t, &units_t)
                    .unwrap()
            })
            .collect();
        for l in &leasers {
            l.heartbeat()?;
        }
        for _ in 0..3 {
            for l in &leasers {
                l.heartbeat()?;
                l.tick()?;
            }
        }
        // Ownership just changed wholesale: refresh the planner's statistics, as autovacuum would.
        admin.batch_execute(&format!("ANALYZE \"{units_t}\"; ANALYZE \"{procs_t}\""))?;
        let until = Instant::now() + Duration::from_secs_f64(secs);
        let mut latencies = Vec::new();
        while Instant::now() < until {
            let t0 = Instant::now();
            leasers[0].tick()?;
            latencies.push(t0.elapsed().as_micros() as f64);
        }
        latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p50 = latencies[latencies.len() / 2];
        println!(
            "membership tick at {units_count} units: {} ticks/s, p50 {p50:.0} us",
            latencies.len() as f64 / secs
        );
        growth.push(json!({ "units": units_count, "p50_us": p50 }));
        convergences.push(convergence(db, &procs_t, &units_t, *units_count, admin)?);
        for l in leasers {
            let _ = l.release();
            let _ = l.delete_process();
        }
        admin.batch_execute(&format!(
            "DROP TABLE \"{units_t}\"; DROP TABLE \"{procs_t}\""
        ))?;
    }
    Ok(json!({ "tick_growth": growth, "convergence": convergences }))
}

/// A cold start: 8 processes started within one heartbeat interval of each other (45 ms apart,
/// heartbeats every 400 ms) on 1,000 units, without the wait before the first claim
/// (`warm_up = 0`, as 0.1 behaved) and with the default (a process counts from its second
/// heartbeat, and a cold fleet's processes claim once every live one has): units claimed and shed
/// until every process holds its 125 and was told so, and how long that took.
pub fn cold_start(db: &Db, admin: &mut Client) -> Result<Value, Error> {
    let id = std::process::id();
    let (procs_t, units_t) = (
        format!("bench_cold_procs_{id}"),
        format!("bench_cold_units_{id}"),
    );
    let units = Units::new(db).with_tables(&procs_t, &units_t)?;
    units.create_tables()?;
    let all: Vec<Unit> = (0..1000)
        .map(|i| Unit::new(&format!("tenant-{}", i % 10), i).unwrap())
        .collect();
    units.add(&all)?;
    let mut out = Vec::new();
    println!(
        "\ncold start: 8 processes started within one heartbeat interval (400 ms), 1,000 units"
    );
    println!("| warm-up | units claimed | units shed | settled after |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, warm_up) in [
        ("none (0.1)", Some(Duration::ZERO)),
        ("settled processes (default)", None),
    ] {
        admin.batch_execute(&format!(
            "UPDATE \"{units_t}\" SET process_id = NULL; DELETE FROM \"{procs_t}\""
        ))?;
        let mut config = Config::default();
        config.ttl = Duration::from_secs(3);
        config.heartbeat_interval = Duration::from_millis(400);
        config.rebalance_interval = Duration::from_millis(100);
        config.sweep_cutoff = Duration::from_secs(30);
        config.warm_up = warm_up;
        let counters: Vec<Arc<Counter>> = (0..8).map(|_| Arc::new(Counter::default())).collect();
        let started = Instant::now();
        let mut running = Vec::new();
        for counter in &counters {
            let leaser = Leaser::new(db, counter.clone(), config.clone())?
                .with_tables(&procs_t, &units_t)?;
            running.push(leaser.spawn()?);
            std::thread::sleep(Duration::from_millis(45));
        }
        let settled = loop {
            let held: Vec<i64> = counters.iter().map(|c| c.held()).collect();
            if held.iter().all(|h| *h == 125) {
                break started.elapsed();
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!("cold start did not settle: {held:?}").into());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let claimed: u64 = counters
            .iter()
            .map(|c| c.gained.load(Ordering::SeqCst))
            .sum();
        let shed: u64 = counters.iter().map(|c| c.lost.load(Ordering::SeqCst)).sum();
        for process in running {
            process.stop()?;
        }
        println!(
            "| {name} | {claimed} | {shed} | {:.2} s |",
            settled.as_secs_f64()
        );
        out.push(json!({
            "warm_up": name, "claimed": claimed, "shed": shed,
            "settled_s": settled.as_secs_f64(),
        }));
    }
    admin.batch_execute(&format!(
        "DROP TABLE \"{units_t}\"; DROP TABLE \"{procs_t}\""
    ))?;
    Ok(Value::Array(out))
}

/// Counts the units a process was told it gained and lost.
#[derive(Default)]
struct Counter {
    gained: AtomicU64,
    lost: AtomicU64,
}

impl Counter {
    fn held(&self) -> i64 {
        self.gained.load(Ordering::SeqCst) as i64 - self.lost.load(Ordering::SeqCst) as i64
    }
}

impl pgtenure::membership::Reconciler for Counter {
    fn units_gained(&self, units: &[Unit]) {
        self.gained.fetch_add(units.len() as u64, Ordering::SeqCst);
    }
    fn units_lost(&self, units: &[Unit], _: pgtenure::membership::UnitLoss) {
        self.lost.fetch_add(units.len() as u64, Ordering::SeqCst);
    }
}

/// Round trips of each operation, counted through a proxy.
pub fn round_trips(
    tick_t: &str,
    fire_t: &str,
    lease_t: &str,
    leader_t: &str,
) -> Result<Vec<(String, f64)>, Error> {
    let proxy = proxy::Proxy::start(0, proxy::database_addr())?;
    let via = DbBuilder::from_config(proxy.config())
        .max_size(1)?
        .build()?;
    let ticks = TickClaims::new(&via).with_table(tick_t)?;
    let fires = FireClaims::new(&via).with_table(fire_t)?;
    let leases = Leases::new(&via).with_table(lease_t)?;
    let elector = Elector::new(&via)
        .with_table(leader_t)?
        .with_name("trips")?;
    let mut out = Vec::new();
    let mut count = |name: &str, f: &mut dyn FnMut(u64)| {
        let n = 50;
        let before = proxy.round_trips();
        for i in 0..n {
            f(i);
        }
        out.push((
            name.to_owned(),
            (proxy.round_trips() - before) as f64 / n as f64,
        ));
    };
    let base = SystemTime::now() - Duration::from_secs(86_400);
    count("tick claim", &mut |i| {
        let _ = ticks
            .claim(&format!("trips-{i}"), base, Duration::from_millis(1))
            .unwrap();
    });
    count("fire claim", &mut |i| {
        fires.claim(&format!("trips@{i}")).unwrap();
    });
    count("lease try_acquire", &mut |i| {
        leases
            .try_acquire(&format!("trips-{i}"), Duration::from_secs(60))
            .unwrap();
    });
    let keys: Vec<String> = (0..100).map(|i| format!("trips-{i}")).collect();
    count("lease renew (batch of 100)", &mut |_| {
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        leases.renew(&refs, Duration::from_secs(60)).unwrap();
    });
    count("lease release", &mut |i| {
        leases.release(&format!("trips-{i}")).unwrap();
    });
    count("is_leader", &mut |_| {
        elector.is_leader().unwrap();
    });
    Ok(out)
}

/// The cost of holding managed leases: renewal statements per second, threads, memory.
pub fn managed_leases(lease_t: &str, secs: f64) -> Result<Value, Error> {
    let mut out = Vec::new();
    for n in [10_usize, 100, 1000] {
        let proxy = proxy::Proxy::start(0, proxy::database_addr())?;
        let via = DbBuilder::from_config(proxy.config())
            .max_size(16)?
            .build()?;
        let leases = Leases::new(&via).with_table(lease_t)?;
        let rss_before = rss_kib();
        let threads_before = threads();
        let ttl = Duration::from_secs(3);
        let held: Vec<_> = (0..n)
            .map(|i| {
                leases
                    .acquire(&format!("held-{n}-{i}"), ttl)
                    .unwrap()
                    .unwrap()
            })
            .collect();
        let before = proxy.round_trips();
        let window = Duration::from_secs_f64(secs.max(3.0));
        thread::sleep(window);
        let renewals = (proxy.round_trips() - before) as f64 / window.as_secs_f64();
        let lost = held.iter().filter(|l| !l.is_held()).count();
        let value = json!({
            "leases": n,
            "renewal_statements_per_sec": renewals,
            "expected_per_sec": n as f64 / (ttl.as_secs_f64() / 3.0),
            "threads": threads() - threads_before,
            "rss_kib": rss_kib() - rss_before,
            "lost": lost,
        });
        println!("holding {n} managed leases: {value}");
        out.push(value);
        drop(held);
    }
    Ok(Value::Array(out))
}

fn rss_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn threads() -> i64 {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count() as i64)
        .unwrap_or(0)
}

/// Three electors poll every 200 ms with a 2 s TTL; the leader crashes (stops polling) or resigns.
pub fn failover(leader_t: &str, handovers: usize) -> Result<Value, Error> {
    let db = Db::connect(&url())?;
    let fleet = format!("failover-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let paused: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
    let resign: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
    let (tx, rx) = pgtenure::crossbeam_channel::unbounded::<(usize, Instant)>();
    let pollers: Vec<_> = (0..3)
        .map(|i| {
            let e = Elector::new(&db)
                .with_table(leader_t)
                .unwrap()
                .with_name(&fleet)
                .unwrap()
                .with_ttl(Duration::from_secs(2))
                .unwrap();
            let (stop, paused, resign, tx) =
                (stop.clone(), paused.clone(), resign.clone(), tx.clone());
            thread::spawn(move || {
                let mut leading = false;
                while !stop.load(Ordering::SeqCst) {
                    if resign[i].swap(false, Ordering::SeqCst) {
                        let _ = e.resign();
                        leading = false;
                        // A resigning instance is shutting down: it sits out until told otherwise.
                        paused[i].store(true, Ordering::SeqCst);
                    }
                    if !paused[i].load(Ordering::SeqCst) {
                        let now = match e.is_leader() {
                            Ok(now) => now,
                            Err(err) => {
                                eprintln!("elector {i}: {err}");
                                false
                            }
                        };
                        if now && !leading {
                            let _ = tx.send((i, Instant::now()));
                        }
                        leading = now;
                    } else {
                        leading = false;
                    }
                    thread::sleep(Duration::from_millis(200));
                }
            })
        })
        .collect();
    let (mut leader, _) = rx.recv_timeout(Duration::from_secs(10))?;
    let (mut crash, mut resigned) = (Vec::new(), Vec::new());
    for n in 0..handovers * 2 {
        let by_crash = n % 2 == 0;
        let start = Instant::now();
        if by_crash {
            paused[leader].store(true, Ordering::SeqCst);
        } else {
            resign[leader].store(true, Ordering::SeqCst);
        }
        let (next, at) = loop {
            let (who, at) = rx.recv_timeout(Duration::from_secs(10))?;
            if who != leader {
                break (who, at);
            }
        };
        let took = at.saturating_duration_since(start).as_secs_f64() * 1000.0;
        if by_crash {
            crash.push(took);
        } else {
            resigned.push(took);
        }
        paused[leader].store(false, Ordering::SeqCst);
        leader = next;
        while rx.try_recv().is_ok() {}
    }
    stop.store(true, Ordering::SeqCst);
    for p in pollers {
        let _ = p.join();
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        json!({ "count": v.len(), "median_ms": v.get(v.len() / 2), "worst_ms": v.last() })
    };
    Ok(
        json!({ "poll_ms": 200, "ttl_ms": 2000, "after_crash": summary(&mut crash), "after_resign": summary(&mut resigned) }),
    )
}

/// Rounds and seconds for 8 processes to reach fair share after a join, a graceful leave and a crash,
/// and the steady-state cost (statements per process per second, writes per held unit).
fn convergence(
    db: &Db,
    procs_t: &str,
    units_t: &str,
    units: i32,
    admin: &mut Client,
) -> Result<Value, Error> {
    let ttl = Duration::from_secs(2);
    let mut config = hand_driven();
    config.ttl = ttl;
    config.heartbeat_interval = Duration::from_millis(500);
    let make = |db: &Db| {
        Leaser::new(db, Arc::new(Quiet), config.clone())
            .unwrap()
            .with_tables(procs_t, units_t)
            .unwrap()
    };
    // Start from no owners in these tables.
    admin.batch_execute(&format!(
        "UPDATE \"{units_t}\" SET process_id = NULL; DELETE FROM \"{procs_t}\""
    ))?;
    let mut fleet: Vec<Leaser> = (0..8).map(|_| make(db)).collect();
    let rounds_until_fair = |fleet: &[Leaser]| -> Result<(usize, f64), Error> {
        let started = Instant::now();
        for round in 1..=200 {
            let mut reports = Vec::new();
            for l in fleet {
                l.heartbeat()?;
                reports.push(l.tick()?);
            }
            // Exact: every process at floor or ceil of units / processes.
            let floor = units as usize / fleet.len();
            let total: usize = reports.iter().map(|r| r.owned).sum();
            if total == units as usize
                && reports
                    .iter()
                    .all(|r| r.owned == floor || r.owned == floor + 1)
            {
                return Ok((round, started.elapsed().as_secs_f64()));
            }
        }
        Ok((200, started.elapsed().as_secs_f64()))
    };
    let start = rounds_until_fair(&fleet)?;
    fleet.push(make(db));
    let join = rounds_until_fair(&fleet)?;
    let leaving = fleet.pop().unwrap();
    leaving.release()?;
    leaving.delete_process()?;
    let leave = rounds_until_fair(&fleet)?;
    // Crash: the last process stops heartbeating; the others converge after its TTL.
    let crashed = fleet.pop().unwrap();
    let crash_start = Instant::now();
    let mut crash_rounds = 0;
    loop {
        crash_rounds += 1;
        let (rounds, _) = rounds_until_fair(&fleet)?;
        if rounds == 1 || crash_start.elapsed() > ttl * 5 {
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let crash_secs = crash_start.elapsed().as_secs_f64();
    drop(crashed);
    // Steady state through a proxy: statements per process per second with `run`'s defaults
    // (heartbeat and rebalance every 5 s) are 2 per 5 s; measure writes per held unit instead.
    let xmins = |admin: &mut Client| -> Result<Vec<String>, Error> {
        Ok(admin
            .query(
                &format!("SELECT xmin::text FROM \"{units_t}\" ORDER BY tenant, shard"),
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    };
    let before = xmins(admin)?;
    for _ in 0..3 {
        for l in &fleet {
            l.heartbeat()?;
            l.tick()?;
        }
    }
    let unit_writes = before
        .iter()
        .zip(xmins(admin)?)
        .filter(|(a, b)| *a != b)
        .count();
    let value = json!({
        "units": units,
        "processes": 8,
        "initial": { "rounds": start.0, "secs": start.1 },
        "join": { "rounds": join.0, "secs": join.1 },
        "graceful_leave": { "rounds": leave.0, "secs": leave.1 },
        "crash": { "ttl_secs": ttl.as_secs_f64(), "secs_until_fair": crash_secs, "polls": crash_rounds },
        "steady_statements_per_process_per_tick": 1,
        "steady_statements_per_process_per_sec_with_defaults": 2.0 / 5.0,
        "unit_rows_written_in_3_steady_rounds": unit_writes,
    });
    println!("membership convergence at {units} units: {value}");
    Ok(value)
}
