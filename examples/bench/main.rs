//! pgtenure's benchmarks: how close it runs to what PostgreSQL allows.
//!
//! `cargo run --profile release-lto --example bench -- [--secs N] [--runs N] [--clients 1,8] [--out FILE]
//! [--handovers N] [--units N] [--only compare|at-once|duel|scenarios|cold-start|hot-loop|handover] [--iterations N]
//! [--no-pgbouncer]` against `DATABASE_URL`
//! or a throwaway server. The `release-lto` profile (the workspace's `Cargo.toml`) is the release
//! profile with link-time optimisation of the whole program, as a service built for speed has it;
//! `--release` runs the same benchmarks with cargo's default release build, 0.06 lower against
//! pgbench at eight clients (docs/performance.md). For each operation at each client count: the library beside `pgbench -M
//! prepared` running the crate's own statement (the limit) and beside the library sending it
//! unprepared (planned at every call), the median of `--runs` runs, then the same through PgBouncer
//! in transaction mode (when `pgbouncer` is installed); round trips per operation counted at the
//! protocol level; the cost of holding managed leases; elector failover; membership tick cost by
//! units and convergence. Prints tables and writes a JSON results file (not committed).
//! `PGTENURE_BENCH_CASES=name,name` keeps only the comparison's cases whose names contain one of
//! them (`none`: only the driver-alone measurements); `PGTENURE_BENCH_COLUMNS=auto,sql` (or `no affinity`: `Auto`
//! with `DbBuilder::thread_affinity(false)`) keeps only those columns of the library (to profile one way). `PGTENURE_BENCH_RECORDER=prometheus` installs
//! `metrics-exporter-prometheus`'s recorder first, so the feature `metrics` (on in the examples)
//! reports to a real exporter: its cost is the ratio's change against a run without.
//! `--only hot-loop` runs `--iterations` refused tick claims on one client and nothing else, to count
//! instructions per operation under `valgrind --tool=callgrind` (see `hot.rs`). `--only handover`
//! measures `--handovers` releases and resignations handed over with and without handover
//! notifications (see `handover.rs`). `--only at-once` runs each comparison case and its pgbench
//! at the same time (see `at_once.rs`: a ratio a drifting host cannot move). `--only duel` runs the
//! kept cases at the same time in one process, with each side's thread CPU per call (see `duel.rs`).

mod at_once;
mod campaigns;
mod cases;
/// The test harness: the database URL, the protocol-counting proxy.
#[path = "../../tests/common/mod.rs"]
mod common;
mod compare;
mod duel;
mod handover;
mod hot;
mod pgbench;
mod scenarios;
mod scheduler;
mod shapes;

use pgtenure::postgres::{Client, NoTls};
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, DbBuilder,
};
use serde_json::json;

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Args {
    secs: u64,
    runs: usize,
    clients: Vec<usize>,
    out: String,
    handovers: usize,
    units: i32,
    only: Option<String>,
    pgbouncer: bool,
    iterations: u64,
}

fn args() -> Args {
    let mut a = Args {
        secs: 2,
        runs: 3,
        clients: vec![1, 8],
        out: "bench-results.json".into(),
        handovers: 20,
        units: 100_000,
        only: None,
        pgbouncer: true,
        iterations: 1000,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).cloned().unwrap_or_default();
        match argv[i].as_str() {
            "--secs" => a.secs = value.parse().expect("--secs N (whole seconds)"),
            "--runs" => a.runs = value.parse().expect("--runs N"),
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
            "--iterations" => a.iterations = value.parse().expect("--iterations N"),
            "--no-pgbouncer" => {
                a.pgbouncer = false;
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    a
}

fn main() -> Result<(), Error> {
    let args = args();
    if args.only.as_deref() == Some("hot-loop") {
        return hot::refused(&common::url(), args.iterations);
    }
    if std::env::var("PGTENURE_BENCH_RECORDER").is_ok_and(|r| r == "prometheus") {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        metrics::set_global_recorder(recorder)?;
        println!("metrics: reported to metrics-exporter-prometheus's recorder");
    }
    let url = common::url();
    let mut admin = Client::connect(&url, NoTls)?;
    let version: String = admin.query_one("SELECT version()", &[])?.get(0);
    let fsync: String = admin.query_one("SHOW fsync", &[])?.get(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("pgtenure benchmark: {cpu}, {cores} cores; {version}; fsync {fsync}");
    println!(
        "database: {}; {} s per measurement, median of {} runs\n",
        if std::env::var("DATABASE_URL").is_ok() {
            "DATABASE_URL"
        } else {
            "a throwaway server"
        },
        args.secs,
        args.runs
    );
    let mut results = json!({
        "machine": { "cpu": cpu, "cores": cores, "postgres": version, "fsync": fsync },
        "secs_per_measurement": args.secs,
        "runs": args.runs,
    });
    let only = args.only.as_deref();

    if only.is_none() || only == Some("compare") {
        let bouncer = if args.pgbouncer {
            match pgtenure::testing::PgBouncer::start(&url) {
                Ok(b) => Some(b),
                Err(e) => {
                    println!("no PgBouncer comparison: {e}");
                    None
                }
            }
        } else {
            None
        };
        results["comparison"] = compare::run(
            &url,
            bouncer.as_ref().map(|b| b.url()),
            &args.clients,
            args.secs,
            args.runs,
        )?;
    }

    if only == Some("at-once") {
        results["at_once"] = at_once::run(&url, &args.clients, args.secs, args.runs)?;
    }

    if only == Some("duel") {
        results["duel"] = duel::run(&url, args.clients[0], args.secs, args.runs)?;
    }

    if only == Some("handover") {
        let bouncer = match args.pgbouncer {
            true => pgtenure::testing::PgBouncer::start(&url)
                .map_err(|e| println!("no PgBouncer measurement: {e}"))
                .ok(),
            false => None,
        };
        let db = DbBuilder::from_config(url.parse()?).build()?;
        let id = std::process::id();
        let (lease_t, leader_t) = (
            format!("bench_h_lease_{id}"),
            format!("bench_h_leader_{id}"),
        );
        Leases::new(&db).with_table(&lease_t)?.create_table()?;
        Elector::new(&db).with_table(&leader_t)?.create_table()?;
        let measured = handover::run(
            &url,
            bouncer.as_ref().map(|b| b.url()),
            &lease_t,
            &leader_t,
            args.handovers,
        );
        admin.batch_execute(&format!(
            "DROP TABLE IF EXISTS \"{lease_t}\", \"{leader_t}\", \"{lease_t}_promotion\", \"{leader_t}_promotion\";
             DROP SEQUENCE IF EXISTS \"{lease_t}_token_seq\", \"{leader_t}_term_seq\""
        ))?;
        results["handover"] = measured?;
    }

    if only == Some("cold-start") {
        let db = DbBuilder::from_config(url.parse()?).max_size(32)?.build()?;
        results["cold_start"] = scenarios::cold_start(&db, &mut admin)?;
    }

    if only.is_none() || only == Some("scenarios") {
        let db = DbBuilder::from_config(url.parse()?).max_size(32)?.build()?;
        let id = std::process::id();
        let (tick_t, fire_t, lease_t, leader_t) = (
            format!("bench_s_tick_{id}"),
            format!("bench_s_fire_{id}"),
            format!("bench_s_lease_{id}"),
            format!("bench_s_leader_{id}"),
        );
        TickClaims::new(&db).with_table(&tick_t)?.create_table()?;
        FireClaims::new(&db).with_table(&fire_t)?.create_table()?;
        Leases::new(&db).with_table(&lease_t)?.create_table()?;
        Elector::new(&db).with_table(&leader_t)?.create_table()?;
        let trips = scenarios::round_trips(&tick_t, &fire_t, &lease_t, &leader_t)?;
        println!("\nround trips per operation, average of 50 (protocol Sync/Query messages through a proxy; the first use of a statement on the connection also prepares it):");
        for (op, n) in &trips {
            println!("  {n:.2}  {op}");
        }
        results["round_trips"] = trips
            .iter()
            .map(|(op, n)| json!({ "operation": op, "round_trips": n }))
            .collect();
        results["managed_leases"] = scenarios::managed_leases(&lease_t, args.secs as f64)?;
        let failover = scenarios::failover(&leader_t, args.handovers)?;
        println!("\nelector failover: {failover:#}");
        results["elector_failover"] = failover;
        let campaign = campaigns::failover(&leader_t, args.handovers)?;
        results["campaign_failover"] = campaign;
        results["scheduler"] = scheduler::lateness(&db, &mut admin, args.secs as f64 * 5.0)?;
        let mut membership = scenarios::membership(&db, &mut admin, args.units, args.secs as f64)?;
        membership["uneven"] = shapes::uneven(&db, &mut admin)?;
        membership["cold_start"] = scenarios::cold_start(&db, &mut admin)?;
        println!("\nmembership: {membership:#}");
        results["membership"] = membership;
        for table in [&tick_t, &fire_t, &lease_t, &leader_t] {
            admin.batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
        }
        admin.batch_execute(&format!(
            "DROP SEQUENCE IF EXISTS \"{lease_t}_token_seq\", \"{leader_t}_term_seq\";
             DROP TABLE IF EXISTS \"{lease_t}_promotion\", \"{leader_t}_promotion\""
        ))?;
    }

    std::fs::write(&args.out, serde_json::to_string_pretty(&results)?)?;
    println!("\nresults written to {}", args.out);
    Ok(())
}
