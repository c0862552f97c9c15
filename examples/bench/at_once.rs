//! Each operation and `pgbench -M prepared` running its statement **at the same time**, sharing
//! the machine: `--only at-once`.
//!
//! The comparison (`compare.rs`) runs the two one after the other, seconds apart. On a shared
//! host whose speed drifts by a third within a minute, one run's ratio moves by as much. Run at
//! once, the two see the same machine at every moment: a drift slows both alike, and the ratio of
//! their rates compares what one call costs each under the same contention. The library's clients
//! are threads of this process, pgbench's are processes of one connection each; the scheduler
//! does not treat the two alike, so the ratio is read against its calibrations, ways of sending
//! the refused tick claim with the driver alone (no pgtenure): on a connection of each client's
//! own, on one taken from an r2d2 pool for each call, from a stack behind one mutex, and from
//! slots where each thread takes the one it used last. Each row also gives the CPU time one call
//! costs each side's clients (from `/proc/self/stat`: this process, and pgbench's processes once
//! waited for).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use pgtenure::postgres::{types::Type, Client, NoTls, Statement};
use pgtenure::Db;
use serde_json::{json, Value};

use super::cases::{kept_cases, sql, Case, MakeOp};
use super::compare::{measure, median};
use super::pgbench;
use super::Error;

/// Runs every case at each client count `runs` times for `secs` seconds, the library (statement
/// mode `Auto`; each thread keeps its connection, the default) and pgbench at once, then the
/// calibrations beside the refused tick claim; returns the JSON.
pub fn run(url: &str, clients: &[usize], secs: u64, runs: usize) -> Result<Value, Error> {
    // Each thread keeping its connection, as the calibration with slots does (without it, the
    // library runs where the calibration with an r2d2 pool does; docs/performance.md).
    let (db, (cases, tables, leasers)) = kept_cases(url)?;
    println!(
        "\nat once: the library and pgbench -M prepared running the same statement at the same \
         time, each with the clients given; median of {runs} runs of {secs} s\n\
         | operation | clients | pgbench prepared/s | pgtenure/s | ratio | client CPU per call, \
         pgtenure / pgbench (us) |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    let calibrations = [
        ("the driver alone", driver_alone(url, &tables.tick, false)?),
        (
            "the driver, an r2d2 pool",
            driver_alone(url, &tables.tick, true)?,
        ),
        (
            "the driver, a locked stack",
            driver_stacked(url, &tables.tick),
        ),
        (
            "the driver, each thread's last slot",
            driver_slots(url, &tables.tick),
        ),
    ];
    let mut ways: Vec<(String, &Case, &MakeOp)> = Vec::new();
    for case in &cases {
        ways.push((case.name.to_owned(), case, &case.lib));
        if case.name == "tick claim, refused" {
            for (way, op) in &calibrations {
                ways.push((format!("{} ({way})", case.name), case, op));
            }
        }
    }
    let mut out = Vec::new();
    let mut measurement = 1_000_000_u64;
    for (name, case, op) in ways {
        for &c in clients {
            let mut pairs = Vec::new();
            for _ in 0..runs {
                measurement += 1;
                pairs.push(at_once(url, &db, case, op, c, secs, measurement)?);
            }
            let mid = |f: &dyn Fn(&Pair) -> f64| median(pairs.iter().map(f).collect());
            let ratio = mid(&|p| p.ours / p.theirs);
            println!(
                "| {name} | {c} | {:.0} | {:.0} | {ratio:.2} | {:.1} / {:.1} |",
                mid(&|p| p.theirs),
                mid(&|p| p.ours),
                mid(&|p| p.our_cpu_us),
                mid(&|p| p.their_cpu_us),
            );
            out.push(json!({
                "operation": name, "clients": c, "ratio": ratio,
                "runs": pairs.iter().map(|p| json!({
                    "pgbench_prepared": p.theirs, "pgtenure": p.ours,
                    "client_cpu_us": { "pgbench_prepared": p.their_cpu_us, "pgtenure": p.our_cpu_us },
                })).collect::<Vec<_>>(),
            }));
        }
    }
    drop(leasers);
    tables.drop_all(url)?;
    Ok(json!(out))
}

/// One run of both at once: calls per second and client CPU per call, each side.
struct Pair {
    ours: f64,
    theirs: f64,
    our_cpu_us: f64,
    their_cpu_us: f64,
}

fn at_once(
    url: &str,
    db: &Db,
    case: &Case,
    op: &MakeOp,
    clients: usize,
    secs: u64,
    measurement: u64,
) -> Result<Pair, Error> {
    let (own, children) = (usage(Who::Own), usage(Who::Children));
    let (ours, theirs) = thread::scope(|s| {
        let lib = s.spawn(move || measure(clients, secs, db, measurement, op));
        let limit = pgbench::run(url, &case.script, clients, secs, &*case.vars);
        (lib.join().expect("the library's clients"), limit)
    });
    let theirs = theirs?;
    let calls = |rate: f64| rate * secs as f64;
    Ok(Pair {
        ours,
        theirs,
        our_cpu_us: (usage(Who::Own) - own) / calls(ours),
        their_cpu_us: (usage(Who::Children) - children) / calls(theirs),
    })
}

/// The refused tick claim sent by `postgres` alone, the statement prepared once per connection
/// and the same parameters as the library's case: on a connection of each client's own, or on one
/// taken from an r2d2 pool of 16 (as the library's is) for each call.
fn driver_alone(url: &str, table: &str, pooled: bool) -> Result<MakeOp, Error> {
    let text = sql("tick_claims/claim.sql", &[("table", table)]);
    let manager = r2d2_postgres::PostgresConnectionManager::new(url.parse()?, NoTls);
    let pool = r2d2::Pool::builder()
        .max_size(16)
        .min_idle(Some(0))
        .test_on_check_out(false)
        .build(manager)?;
    let url = url.to_owned();
    Ok(Box::new(move |_, _, _| {
        let (pool, text) = (pool.clone(), text.clone());
        let mut own = (!pooled).then(|| connect(&url, &text));
        Box::new(move |_| match own.as_mut() {
            Some((client, named)) => claim(client, named),
            None => {
                let mut conn = pool.get().expect("a pooled connection");
                let named =
                    match r2d2::PooledConnection::extensions_mut(&mut conn).get::<Statement>() {
                        Some(named) => named.clone(),
                        None => {
                            let named = prepare(&mut conn, &text);
                            r2d2::PooledConnection::extensions_mut(&mut conn).insert(named.clone());
                            named
                        }
                    };
                claim(&mut conn, &named);
            }
        })
    }))
}

/// The parameter types of `sql/tick_claims/claim.sql`.
pub const CLAIM_TYPES: [Type; 7] = [
    Type::TEXT,
    Type::TIMESTAMPTZ,
    Type::INT8,
    Type::TEXT,
    Type::INT8,
    Type::BOOL,
    Type::INT8,
];

fn prepare(client: &mut Client, text: &str) -> Statement {
    client.prepare_typed(text, &CLAIM_TYPES).expect("prepared")
}

/// One refused tick claim on `client`.
pub fn claim(client: &mut Client, named: &Statement) {
    let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let rows = client
        .query(
            named,
            &[
                &"contended",
                &taken,
                &60_000_000_i64,
                &"x",
                &1_i64,
                &true,
                &60_000_000_i64,
            ],
        )
        .expect("the claim");
    assert!(rows[0].get::<_, Option<i64>>("token").is_none());
}

/// Whose CPU time [`usage`] reads.
#[derive(Clone, Copy)]
enum Who {
    /// This process: the library's clients.
    Own,
    /// This process's children once waited for: pgbench's.
    Children,
}

/// CPU time (user and system) in microseconds, from `/proc/self/stat` (in clock ticks of 10 ms:
/// a run's seconds of CPU time are read to about 1%).
fn usage(who: Who) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name, which ends with the last ')': the state is field 3,
    // utime and stime fields 14 and 15, cutime and cstime fields 16 and 17.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<f64> = rest
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let field = |n: usize| fields.get(n - 3).copied().unwrap_or(0.0);
    let ticks = match who {
        Who::Own => field(14) + field(15),
        Who::Children => field(16) + field(17),
    };
    ticks * 10_000.0
}

/// The same from a stack of connections behind one mutex (no r2d2): the last returned is the next
/// taken, by whichever thread asks.
fn driver_stacked(url: &str, table: &str) -> MakeOp {
    let text = sql("tick_claims/claim.sql", &[("table", table)]);
    let stack: Arc<Mutex<Vec<(Client, Statement)>>> = Arc::default();
    let url = url.to_owned();
    Box::new(move |_, _, _| {
        let (stack, text, url) = (stack.clone(), text.clone(), url.clone());
        Box::new(move |_| {
            let taken = stack.lock().pop();
            let (mut client, named) = taken.unwrap_or_else(|| connect(&url, &text));
            claim(&mut client, &named);
            stack.lock().push((client, named));
        })
    })
}

/// A connection slot of [`driver_slots`].
type Slot = Mutex<Option<(Client, Statement)>>;

/// The same from 16 slots, each thread taking the slot it used last when that one is free, else the
/// next free one.
fn driver_slots(url: &str, table: &str) -> MakeOp {
    let text = sql("tick_claims/claim.sql", &[("table", table)]);
    let slots: Arc<Vec<Slot>> = Arc::new((0..16).map(|_| Mutex::new(None)).collect());
    let url = url.to_owned();
    Box::new(move |_, t, _| {
        let (slots, text, url) = (slots.clone(), text.clone(), url.clone());
        let mut last = t % slots.len();
        Box::new(move |_| {
            let n = slots.len();
            let (i, mut slot) = (0..n)
                .map(|k| (last + k) % n)
                .find_map(|i| slots[i].try_lock().map(|slot| (i, slot)))
                .expect("more slots than clients");
            last = i;
            let (client, named) = slot.get_or_insert_with(|| connect(&url, &text));
            claim(client, named);
        })
    })
}

fn connect(url: &str, text: &str) -> (Client, Statement) {
    let mut client = Client::connect(url, NoTls).expect("a connection");
    let named = prepare(&mut client, text);
    (client, named)
}
