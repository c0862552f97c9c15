//! pgtenure's benchmarks: how close it runs to what PostgreSQL allows.
//!
//! `cargo run --release --example bench -- [--secs N] [--clients 1,8] [--out FILE] [--handovers N]
//! [--units N]` against `DATABASE_URL` or a throwaway server. For each operation, at each client
//! count, the library beside the same SQL statement issued raw through `postgres::Client`
//! (`query_typed`, one dedicated connection per thread) and their ratio; round trips per operation
//! counted at the protocol level; the cost of holding managed leases; elector failover; membership
//! convergence and steady-state cost; and how a tick's cost grows with the number of units. Prints
//! a table and writes a JSON results file (not committed).

/// The test harness: the database URL, the protocol-counting proxy.
#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use pgtenure::membership::{Config, Hooks, Leaser, Reconciler, Unit, Units};
use pgtenure::postgres::types::{ToSql, Type};
use pgtenure::postgres::{self, Client, NoTls};
use pgtenure::{Db, DbBuilder, Elector, FireClaims, Leases, TickClaims};
use serde_json::{json, Value};

type Error = Box<dyn std::error::Error + Send + Sync>;

use common::{proxy, url};

struct Args {
    secs: f64,
    clients: Vec<usize>,
    out: String,
    handovers: usize,
    units: i32,
    only: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        secs: 3.0,
        clients: vec![1, 8],
        out: "bench-results.json".into(),
        handovers: 20,
        units: 100_000,
        only: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--secs" => a.secs = value.parse().expect("--secs N"),
            "--clients" => {
                a.clients = value
                    .split(',')
                    .map(|c| c.parse().expect("--clients 1,8"))
                    .collect()
            }
            "--out" => a.out = value,
            "--handovers" => a.handovers = value.parse().expect("--handovers N"),
            "--units" => a.units = value.parse().expect("--units N"),
            "--only" => a.only = Some(value),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

/// Throughput and latency of one operation at one client count.
#[derive(Clone, Debug)]
struct Stats {
    ops_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Runs `op` on `clients` threads for `secs`, each thread with its own state from `setup`.
fn measure<S>(
    clients: usize,
    secs: f64,
    setup: impl Fn(usize) -> S + Sync,
    op: impl Fn(&mut S, u64) + Sync,
) -> Stats {
    let barrier = Barrier::new(clients);
    let latencies: Mutex<Vec<u32>> = Mutex::new(Vec::new());
    let total = Mutex::new(0_u64);
    let elapsed = Mutex::new(0.0_f64);
    thread::scope(|s| {
        for t in 0..clients {
            let (barrier, latencies, total, elapsed, setup, op) =
                (&barrier, &latencies, &total, &elapsed, &setup, &op);
            s.spawn(move || {
                let mut state = setup(t);
                // Warm up: a connection, caches.
                for i in 0..20 {
                    op(&mut state, u64::MAX / 2 + i);
                }
                barrier.wait();
                let start = Instant::now();
                let until = start + Duration::from_secs_f64(secs);
                let mut mine = Vec::with_capacity(100_000);
                let mut i = 0;
                while Instant::now() < until {
                    let t0 = Instant::now();
                    op(&mut state, i);
                    mine.push(t0.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                    i += 1;
                }
                *elapsed.lock() += start.elapsed().as_secs_f64();
                *total.lock() += i;
                latencies.lock().extend(mine);
            });
        }
    });
    let mut all = latencies.into_inner();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0) as f64
    };
    let per_thread_secs = elapsed.into_inner() / clients as f64;
    Stats {
        ops_per_sec: total.into_inner() as f64 / per_thread_secs,
        p50_us: pct(0.5),
        p99_us: pct(0.99),
    }
}

/// A library statement with its tables substituted, as the library renders it.
fn sql(file: &str, tables: &[(&str, &str)]) -> String {
    let mut text = file.to_owned();
    for (name, table) in tables {
        text = text
            .replace(
                &format!("{{{name}:token_seq}}"),
                &format!("\"{table}_token_seq\""),
            )
            .replace(
                &format!("{{{name}:term_seq}}"),
                &format!("\"{table}_term_seq\""),
            )
            .replace(&format!("{{{name}}}"), &format!("\"{table}\""));
    }
    text
}

fn raw_client() -> Client {
    let mut config: postgres::Config = url().parse().unwrap();
    config.options("-c default_transaction_isolation=read\\ committed");
    config.connect(NoTls).expect("a raw connection")
}

fn query(client: &mut Client, text: &str, params: &[(&(dyn ToSql + Sync), Type)]) {
    client.query_typed(text, params).expect("the raw statement");
}

const MICRO: i64 = 1_000_000;

struct Quiet;
impl Reconciler for Quiet {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, _: &[Unit]) {}
}

/// One row of the side-by-side table.
struct Row {
    op: String,
    clients: usize,
    lib: Stats,
    raw: Stats,
}

fn main() -> Result<(), Error> {
    let args = args();
    let db = DbBuilder::from_config(url().parse()?)
        .max_size(32)?
        .build()?;
    let mut admin = Client::connect(&url(), NoTls)?;
    let version: String = admin.query_one("SELECT version()", &[])?.get(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("pgtenure benchmark: {cpu}, {cores} cores; {version}");
    println!(
        "database: {}; {} s per measurement\n",
        if std::env::var("DATABASE_URL").is_ok() {
            "DATABASE_URL"
        } else {
            "a throwaway server (fsync off)"
        },
        args.secs
    );

    let id = std::process::id();
    let (tick_t, fire_t, lease_t, leader_t) = (
        format!("bench_tick_{id}"),
        format!("bench_fire_{id}"),
        format!("bench_lease_{id}"),
        format!("bench_leader_{id}"),
    );
    let ticks = TickClaims::new(&db).with_table(&tick_t)?;
    let fires = FireClaims::new(&db).with_table(&fire_t)?;
    let leases = Leases::new(&db).with_table(&lease_t)?;
    ticks.create_table()?;
    fires.create_table()?;
    leases.create_table()?;
    Elector::new(&db).with_table(&leader_t)?.create_table()?;
    if args.only.as_deref() == Some("failover") {
        println!("{:#}", failover(&leader_t, args.handovers)?);
        return Ok(());
    }
    let t_tick = [("table", tick_t.as_str())];
    let t_fire = [("table", fire_t.as_str())];
    let t_lease = [("table", lease_t.as_str())];
    let t_leader = [("table", leader_t.as_str())];
    let claim_sql = sql(include_str!("../sql/tick_claims/claim.sql"), &t_tick);
    let fire_sql = sql(include_str!("../sql/fire_claims/claim.sql"), &t_fire);
    let acquire_sql = sql(include_str!("../sql/leases/acquire.sql"), &t_lease);
    let release_sql = sql(include_str!("../sql/leases/release.sql"), &t_lease);
    let renew_sql = sql(include_str!("../sql/leases/renew.sql"), &t_lease);
    let leader_sql = sql(include_str!("../sql/elector/is_leader.sql"), &t_leader);
    let base = SystemTime::now() - Duration::from_secs(30 * 86_400);
    let mut rows: Vec<Row> = Vec::new();
    let secs = args.secs;
    let run = std::sync::atomic::AtomicU64::new(0);
    let next_run = || run.fetch_add(1, Ordering::SeqCst);

    for &clients in &args.clients {
        // Tick claims that win: per thread, 1,000 jobs in turn, each at a later tick.
        let r = next_run();
        let lib = measure(
            clients,
            secs,
            |t| {
                TickClaims::new(&db)
                    .with_table(&tick_t)
                    .unwrap()
                    .with_owner(&format!("lib-{r}-{t}"))
                    .unwrap()
            },
            |c, i| {
                let tick = base + Duration::from_secs(i % (u64::MAX / 4));
                let _ = c
                    .claim(
                        &format!("lib-{r}-{}-{}", c.owner(), i % 1000),
                        tick,
                        Duration::from_millis(1),
                    )
                    .unwrap();
            },
        );
        let r = next_run();
        let raw = measure(
            clients,
            secs,
            |t| (raw_client(), format!("raw-{r}-{t}")),
            |(c, owner), i| {
                let tick = base + Duration::from_secs(i % (u64::MAX / 4));
                let job = format!("raw-{r}-{owner}-{}", i % 1000);
                query(
                    c,
                    &claim_sql,
                    &[
                        (&job, Type::TEXT),
                        (&tick, Type::TIMESTAMPTZ),
                        (&1000_i64, Type::INT8),
                        (owner, Type::TEXT),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "tick claim (won)".into(),
            clients,
            lib,
            raw,
        });

        // Tick claims that are refused: everyone asks for a tick already claimed (a read).
        let taken = base + Duration::from_secs(1);
        let _ = ticks.claim("contended", taken, Duration::from_secs(3600))?;
        let lib = measure(
            clients,
            secs,
            |_| TickClaims::new(&db).with_table(&tick_t).unwrap(),
            |c, _| {
                assert!(c
                    .claim("contended", taken, Duration::from_secs(60))
                    .unwrap()
                    .is_none());
            },
        );
        let raw = measure(
            clients,
            secs,
            |_| raw_client(),
            |c, _| {
                query(
                    c,
                    &claim_sql,
                    &[
                        (&"contended", Type::TEXT),
                        (&taken, Type::TIMESTAMPTZ),
                        (&(60 * MICRO), Type::INT8),
                        (&"x", Type::TEXT),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "tick claim (refused)".into(),
            clients,
            lib,
            raw,
        });

        // Fire claims: a new key each time (won), and a live key again (refused).
        let r = next_run();
        let lib = measure(
            clients,
            secs,
            |t| (FireClaims::new(&db).with_table(&fire_t).unwrap(), t),
            |(c, t), i| {
                assert!(c.claim(&format!("lib-{r}-{t}@{i}")).unwrap());
            },
        );
        let r = next_run();
        let raw = measure(
            clients,
            secs,
            |t| (raw_client(), t),
            |(c, t), i| {
                let key = format!("raw-{r}-{t}@{i}");
                query(
                    c,
                    &fire_sql,
                    &[
                        (&key, Type::TEXT),
                        (&"h", Type::TEXT),
                        (&(600 * MICRO), Type::INT8),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "fire claim (won)".into(),
            clients,
            lib,
            raw,
        });
        let lib = measure(
            clients,
            secs,
            |_| FireClaims::new(&db).with_table(&fire_t).unwrap(),
            |c, _| {
                let _ = c.claim("lib-hot@1").unwrap();
            },
        );
        let raw = measure(
            clients,
            secs,
            |_| raw_client(),
            |c, _| {
                query(
                    c,
                    &fire_sql,
                    &[
                        (&"raw-hot@1", Type::TEXT),
                        (&"h", Type::TEXT),
                        (&(600 * MICRO), Type::INT8),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "fire claim (refused)".into(),
            clients,
            lib,
            raw,
        });

        // Lease acquire + release, each thread on keys of its own.
        let r = next_run();
        let lib = measure(
            clients,
            secs,
            |t| {
                Leases::new(&db)
                    .with_table(&lease_t)
                    .unwrap()
                    .with_owner(&format!("lib-{r}-{t}"))
                    .unwrap()
            },
            |l, i| {
                let key = format!("{}-{}", l.owner(), i % 16);
                assert!(l
                    .try_acquire(&key, Duration::from_secs(30))
                    .unwrap()
                    .is_some());
                assert!(l.release(&key).unwrap());
            },
        );
        let r = next_run();
        let raw = measure(
            clients,
            secs,
            |t| (raw_client(), format!("raw-{r}-{t}")),
            |(c, owner), i| {
                let key = format!("{owner}-{}", i % 16);
                query(
                    c,
                    &acquire_sql,
                    &[
                        (&key, Type::TEXT),
                        (owner, Type::TEXT),
                        (&(30 * MICRO), Type::INT8),
                    ],
                );
                query(
                    c,
                    &release_sql,
                    &[
                        (&key, Type::TEXT),
                        (owner, Type::TEXT),
                        (&None::<i64>, Type::INT8),
                        (&false, Type::BOOL),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "lease acquire + release".into(),
            clients,
            lib,
            raw,
        });

        // Batch renewals of 1, 100 and 1,000 keys per owner.
        for batch in [1_usize, 100, 1000] {
            let r = next_run();
            let setup_lib = |t: usize| {
                let l = Leases::new(&db)
                    .with_table(&lease_t)
                    .unwrap()
                    .with_owner(&format!("lib-{r}-{t}"))
                    .unwrap();
                let keys: Vec<String> = (0..batch).map(|k| format!("lib-{r}-{t}-{k}")).collect();
                for k in &keys {
                    l.try_acquire(k, Duration::from_secs(600)).unwrap().unwrap();
                }
                (l, keys)
            };
            let lib = measure(clients, secs, setup_lib, |(l, keys), _| {
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                let renewal = l.renew(&refs, Duration::from_secs(600)).unwrap();
                assert_eq!(renewal.held().count(), refs.len());
            });
            let setup_raw = |t: usize| {
                let owner = format!("lib-{r}-{t}");
                let keys: Vec<String> = (0..batch).map(|k| format!("lib-{r}-{t}-{k}")).collect();
                (raw_client(), owner, keys)
            };
            let raw = measure(clients, secs, setup_raw, |(c, owner, keys), _| {
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                query(
                    c,
                    &renew_sql,
                    &[
                        (&refs, Type::TEXT_ARRAY),
                        (owner, Type::TEXT),
                        (&(600 * MICRO), Type::INT8),
                    ],
                );
            });
            rows.push(Row {
                op: format!("lease renew, batch of {batch}"),
                clients,
                lib,
                raw,
            });
        }

        // is_leader, each thread leading a fleet of its own (the renewing path).
        let r = next_run();
        let lib = measure(
            clients,
            secs,
            |t| {
                Elector::new(&db)
                    .with_table(&leader_t)
                    .unwrap()
                    .with_name(&format!("lib-{r}-{t}"))
                    .unwrap()
            },
            |e, _| {
                assert!(e.is_leader().unwrap());
            },
        );
        let r = next_run();
        let raw = measure(
            clients,
            secs,
            |t| (raw_client(), format!("raw-{r}-{t}")),
            |(c, name), _| {
                query(
                    c,
                    &leader_sql,
                    &[
                        (name, Type::TEXT),
                        (&"me", Type::TEXT),
                        (&(30 * MICRO), Type::INT8),
                    ],
                );
            },
        );
        rows.push(Row {
            op: "is_leader (leader)".into(),
            clients,
            lib,
            raw,
        });
    }

    // Membership: heartbeat, and the steady tick at 1,000 and `--units` units (8 processes).
    let mut growth: Vec<(i32, Stats, Stats)> = Vec::new();
    let mut membership_rows: Vec<Value> = Vec::new();
    let mut sizes: Vec<i32> = [1_000, 10_000, args.units]
        .into_iter()
        .filter(|n| *n <= args.units)
        .collect();
    sizes.dedup();
    for (n, units_count) in sizes.iter().enumerate() {
        let (procs_t, units_t) = (
            format!("bench_procs_{id}_{n}"),
            format!("bench_units_{id}_{n}"),
        );
        let units = Units::new(&db).with_tables(&procs_t, &units_t)?;
        units.create_tables()?;
        let all: Vec<Unit> = (0..*units_count)
            .map(|i| Unit::new(&format!("tenant-{}", i % 50), i).unwrap())
            .collect();
        for chunk in all.chunks(50_000) {
            units.add(chunk)?;
        }
        admin.batch_execute(&format!("ANALYZE \"{units_t}\""))?;
        let mut config = Config::default();
        config.ttl = Duration::from_secs(120);
        config.heartbeat_interval = Duration::from_secs(30);
        config.max_claim_per_tick = 100_000;
        let leasers: Vec<Leaser> = (0..8)
            .map(|_| {
                Leaser::new(&db, Arc::new(Quiet), config.clone(), Hooks::default())
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
        let stats_sql = sql(
            include_str!("../sql/membership/stats.sql"),
            &[("units", &units_t), ("processes", &procs_t)],
        );
        let leasers = &leasers;
        let lib = measure(
            1,
            secs,
            |_| (),
            |_, _| {
                leasers[0].tick().unwrap();
            },
        );
        let pid = leasers[0].process_id().to_owned();
        let raw = measure(
            1,
            secs,
            |_| raw_client(),
            |c, _| {
                query(c, &stats_sql, &[(&pid.as_str(), Type::TEXT)]);
            },
        );
        println!(
            "membership tick at {units_count} units: {:.0} ticks/s, p50 {:.0} us",
            lib.ops_per_sec, lib.p50_us
        );
        if *units_count == 1_000 || *units_count == args.units {
            for &clients in &args.clients {
                let lib_hb = measure(
                    clients,
                    secs,
                    |t| t % 8,
                    |t, _| leasers[*t].heartbeat().unwrap(),
                );
                let hb_sql = sql(
                    include_str!("../sql/membership/heartbeat.sql"),
                    &[("units", &units_t), ("processes", &procs_t)],
                );
                let ids: Vec<String> = leasers.iter().map(|l| l.process_id().to_owned()).collect();
                let raw_hb = measure(
                    clients,
                    secs,
                    |t| (raw_client(), ids[t % 8].clone()),
                    |(c, id), _| {
                        query(
                            c,
                            &hb_sql,
                            &[
                                (&id.as_str(), Type::TEXT),
                                (&(120 * MICRO), Type::INT8),
                                (&1_i32, Type::INT4),
                                (&1_i64, Type::INT8),
                                (&"h", Type::TEXT),
                                (&"v", Type::TEXT),
                            ],
                        );
                    },
                );
                rows.push(Row {
                    op: format!("membership heartbeat ({units_count} units)"),
                    clients,
                    lib: lib_hb,
                    raw: raw_hb,
                });
                let lib_tick = measure(
                    clients,
                    secs,
                    |t| t % 8,
                    |t, _| {
                        leasers[*t].tick().unwrap();
                    },
                );
                let raw_tick = measure(
                    clients,
                    secs,
                    |t| (raw_client(), ids[t % 8].clone()),
                    |(c, id), _| {
                        query(c, &stats_sql, &[(&id.as_str(), Type::TEXT)]);
                    },
                );
                rows.push(Row {
                    op: format!("membership tick, steady ({units_count} units)"),
                    clients,
                    lib: lib_tick,
                    raw: raw_tick,
                });
            }
        }
        growth.push((*units_count, lib, raw));
        membership_rows.push(convergence(
            &db,
            &procs_t,
            &units_t,
            *units_count,
            &mut admin,
        )?);
        for l in leasers {
            let _ = l.release();
            let _ = l.delete_process();
        }
        admin.batch_execute(&format!(
            "DROP TABLE \"{units_t}\"; DROP TABLE \"{procs_t}\""
        ))?;
    }

    let trips = round_trips(&tick_t, &fire_t, &lease_t, &leader_t)?;
    let managed = managed_leases(&lease_t, secs)?;
    let failover = failover(&leader_t, args.handovers)?;

    // The table.
    println!(
        "\n{:<38} {:>7} {:>11} {:>11} {:>7} {:>9} {:>9}",
        "operation", "clients", "lib ops/s", "raw ops/s", "ratio", "lib p50", "lib p99"
    );
    for row in &rows {
        println!(
            "{:<38} {:>7} {:>11.0} {:>11.0} {:>7.2} {:>7.0}us {:>7.0}us",
            row.op,
            row.clients,
            row.lib.ops_per_sec,
            row.raw.ops_per_sec,
            row.lib.ops_per_sec / row.raw.ops_per_sec,
            row.lib.p50_us,
            row.lib.p99_us
        );
    }
    println!("\nround trips per operation (protocol Sync/Query messages through a proxy):");
    for (op, n) in &trips {
        println!("  {n:.2}  {op}");
    }
    println!(
        "\nsteady membership tick by units (1 client): {}",
        growth
            .iter()
            .map(|(n, s, _)| format!("{n}: p50 {:.0} us", s.p50_us))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("\nmanaged leases held: {managed:#}");
    println!("\nelector failover: {failover:#}");
    println!(
        "\nmembership convergence: {:#}",
        Value::Array(membership_rows.clone())
    );

    let results = json!({
        "machine": { "cpu": cpu, "cores": cores, "postgres": version },
        "secs_per_measurement": secs,
        "operations": rows.iter().map(|r| json!({
            "operation": r.op, "clients": r.clients,
            "lib": { "ops_per_sec": r.lib.ops_per_sec, "p50_us": r.lib.p50_us, "p99_us": r.lib.p99_us },
            "raw": { "ops_per_sec": r.raw.ops_per_sec, "p50_us": r.raw.p50_us, "p99_us": r.raw.p99_us },
            "ratio": r.lib.ops_per_sec / r.raw.ops_per_sec,
        })).collect::<Vec<_>>(),
        "round_trips": trips.iter().map(|(op, n)| json!({ "operation": op, "round_trips": n })).collect::<Vec<_>>(),
        "tick_growth": growth.iter().map(|(n, lib, raw)| json!({ "units": n, "lib_p50_us": lib.p50_us, "raw_stats_p50_us": raw.p50_us })).collect::<Vec<_>>(),
        "managed_leases": managed,
        "elector_failover": failover,
        "membership": membership_rows,
    });
    std::fs::write(&args.out, serde_json::to_string_pretty(&results)?)?;
    println!("\nresults written to {}", args.out);
    for table in [&tick_t, &fire_t, &lease_t, &leader_t] {
        admin.batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
    }
    admin.batch_execute(&format!(
        "DROP SEQUENCE IF EXISTS \"{lease_t}_token_seq\", \"{leader_t}_term_seq\""
    ))?;
    Ok(())
}

/// Round trips of each operation, counted through a proxy.
fn round_trips(
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
fn managed_leases(lease_t: &str, secs: f64) -> Result<Value, Error> {
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
fn failover(leader_t: &str, handovers: usize) -> Result<Value, Error> {
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
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = Duration::from_millis(500);
    let make = |db: &Db| {
        Leaser::new(db, Arc::new(Quiet), config.clone(), Hooks::default())
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
            let fair = reports.iter().map(|r| r.fair_share).max().unwrap_or(0);
            let total: usize = reports.iter().map(|r| r.owned).sum();
            if total == units as usize
                && reports.iter().all(|r| {
                    (r.owned_weight as f64) <= fair as f64 * 1.2
                        && r.owned_weight as f64 >= fair as f64 * 0.8 - 1.0
                })
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
