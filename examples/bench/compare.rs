//! Each operation side by side with `pgbench -M prepared` running the crate's own statement (the
//! limit), in each statement mode (`Auto`, which a direct connection proves: protocol-level; `Sql`;
//! `Unprepared`: planned at every call, how pgtenure 0.1 sent everything), at each client count,
//! in one run; the median of `runs` runs. Then `Auto` (which finds no proof there: SQL-level) and
//! `Unprepared` through PgBouncer in transaction mode.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use pgtenure::{Db, StatementMode};
use serde_json::{json, Value};

use super::cases::{cases, sql, MakeOp};
use super::pgbench;
use super::Error;

/// Operations per second of `clients` threads each running its own op for `secs`.
pub fn measure(clients: usize, secs: u64, db: &Db, run: u64, make: &MakeOp) -> f64 {
    let barrier = Barrier::new(clients);
    let counts: Vec<(u64, f64)> = thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut op = make(db, t, run);
                    for i in 0..20 {
                        op(u64::MAX / 2 + i);
                    }
                    barrier.wait();
                    let start = Instant::now();
                    let until = start + Duration::from_secs(secs);
                    let mut i = 0;
                    while Instant::now() < until {
                        op(i);
                        i += 1;
                    }
                    (i, start.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    counts.iter().map(|(n, secs)| *n as f64 / secs).sum()
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// One cell of the table: medians over the runs, per column.
struct Cell {
    name: &'static str,
    clients: usize,
    limit: Vec<f64>,
    /// Per column of `columns` (direct, then through PgBouncer): the runs.
    columns: Vec<Vec<f64>>,
}

/// Runs the comparison; returns its JSON.
pub fn run(
    url: &str,
    bouncer_url: Option<&str>,
    clients: &[usize],
    secs: u64,
    runs: usize,
) -> Result<Value, Error> {
    let pool = |url: &str, mode: StatementMode, cancel: bool| -> Result<Db, Error> {
        Ok(Db::builder(url)?
            .max_size(16)?
            .statement_mode(mode)
            .build()?
            .with_cancel_on_deadline(cancel))
    };
    let db = pool(url, StatementMode::Auto, true)?;
    // Direct: Auto (proven direct: protocol-level; each thread keeps its connection, the
    // default), the same with every connection handed back to r2d2 after each call, then
    // SQL-level and unprepared forced.
    let handed_back = Db::builder(url)?
        .max_size(16)?
        .thread_affinity(false)
        .build()?;
    let mut columns: Vec<(String, Db)> = vec![
        ("auto".into(), db.clone()),
        ("no affinity".into(), handed_back),
        ("sql".into(), pool(url, StatementMode::Sql, true)?),
        (
            "unprepared".into(),
            pool(url, StatementMode::Unprepared, true)?,
        ),
    ];
    if let Some(b) = bouncer_url {
        columns.push((
            "pgbouncer auto".into(),
            pool(b, StatementMode::Auto, false)?,
        ));
        columns.push((
            "pgbouncer unprepared".into(),
            pool(b, StatementMode::Unprepared, false)?,
        ));
    }
    // `PGTENURE_BENCH_COLUMNS=auto`: only those columns (a profile of one way).
    if let Ok(keep) = std::env::var("PGTENURE_BENCH_COLUMNS") {
        columns.retain(|(name, _)| keep.split(',').any(|k| k == name));
    }
    let (mut cases, tables, leasers) = cases(&db, std::process::id())?;
    if let Ok(filter) = std::env::var("PGTENURE_BENCH_CASES") {
        cases.retain(|case| filter.split(',').any(|f| case.name.contains(f)));
    }
    let mut cells: Vec<Cell> = Vec::new();
    for case in &cases {
        for &c in clients {
            cells.push(Cell {
                name: case.name,
                clients: c,
                limit: Vec::new(),
                columns: vec![Vec::new(); columns.len()],
            });
        }
    }
    let mut measurement = 0_u64;
    for run in 0..runs {
        eprintln!("comparison run {} of {runs}", run + 1);
        let mut cell = cells.iter_mut();
        for case in &cases {
            for &c in clients {
                let cell = cell.next().unwrap();
                // pgbench first in every other run, so that a machine slowing down or speeding
                // up during a run favours neither side.
                let limit_first = run % 2 == 1;
                if limit_first {
                    cell.limit
                        .push(pgbench::run(url, &case.script, c, secs, &*case.vars)?);
                }
                for (i, (_, column_db)) in columns.iter().enumerate() {
                    measurement += 1;
                    cell.columns[i].push(measure(c, secs, column_db, measurement, &case.lib));
                }
                if !limit_first {
                    cell.limit
                        .push(pgbench::run(url, &case.script, c, secs, &*case.vars)?);
                }
                eprintln!(
                    "  {:<30} {c}: pgbench {:.0} / {}",
                    case.name,
                    cell.limit.last().unwrap(),
                    columns
                        .iter()
                        .zip(&cell.columns)
                        .map(|((name, _), runs)| format!("{name} {:.0}", runs.last().unwrap()))
                        .collect::<Vec<_>>()
                        .join(" / ")
                );
            }
        }
    }
    let modes: Vec<String> = columns
        .iter()
        .map(|(name, db)| format!("{name}: {}", db.statement_modes()))
        .collect();
    println!(
        "\nmedian of {runs} runs, {secs} s each; limit: pgbench -M prepared running the crate's \
         statement; each column's ratio to it (the median of each run's ratio to the pgbench run \
         beside it). What each column's connections used: {}",
        modes.join("; ")
    );
    let header: Vec<&str> = columns.iter().map(|(name, _)| name.as_str()).collect();
    println!(
        "| operation | clients | pgbench prepared/s | {} |",
        header
            .iter()
            .map(|h| format!("{h}/s | ratio"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!(
        "| --- | ---: | ---: |{}",
        " ---: | ---: |".repeat(columns.len())
    );
    let mut out = Vec::new();
    for cell in &cells {
        let limit = median(cell.limit.clone());
        let medians: Vec<f64> = cell
            .columns
            .iter()
            .map(|runs| median(runs.clone()))
            .collect();
        // Each run's ratio is taken beside its own pgbench run (seconds apart), and the median of
        // those is reported: on a shared host whose speed drifts between runs by a third, the
        // ratio of the two medians would pair runs minutes apart.
        let ratios: Vec<f64> = cell
            .columns
            .iter()
            .map(|runs| median(runs.iter().zip(&cell.limit).map(|(r, l)| r / l).collect()))
            .collect();
        println!(
            "| {} | {} | {limit:.0} | {} |",
            cell.name,
            cell.clients,
            medians
                .iter()
                .zip(&ratios)
                .map(|(m, ratio)| format!("{m:.0} | {ratio:.2}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let mut row = json!({
            "operation": cell.name, "clients": cell.clients, "pgbench_prepared": limit,
            "runs": { "pgbench_prepared": cell.limit },
        });
        for (i, (name, _)) in columns.iter().enumerate() {
            let key = name.replace(' ', "_");
            row[&key] = json!(medians[i]);
            row[format!("{key}_ratio")] = json!(ratios[i]);
            row["runs"][&key] = json!(cell.columns[i]);
        }
        out.push(row);
    }
    let limits = driver_limits(url, &tables.tick, clients, secs, runs)?;
    drop(leasers);
    tables.drop_all(url)?;
    Ok(json!({ "operations": out, "driver": limits }))
}

/// Where the gap to pgbench comes from: the refused tick claim sent by the driver alone (no pool,
/// no pgtenure), as a protocol-level prepared statement (not pooler-safe: the driver names them
/// `s0, s1, ...` in every process) and as SQL-level `EXECUTE` (what pgtenure sends).
fn driver_limits(
    url: &str,
    tick_t: &str,
    clients: &[usize],
    secs: u64,
    runs: usize,
) -> Result<Value, Error> {
    use pgtenure::postgres::{Client, NoTls};
    let text = sql("tick_claims/claim.sql", &[("table", tick_t)]);
    let types = super::at_once::CLAIM_TYPES;
    #[derive(Clone, Copy, PartialEq)]
    enum Send {
        Protocol,
        Execute,
        SimpleExecute,
    }
    let run = |clients: usize, way: Send| -> f64 {
        let barrier = Barrier::new(clients);
        let counts: Vec<f64> = thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    let (barrier, text, types) = (&barrier, &text, &types);
                    s.spawn(move || {
                        let mut c = Client::connect(url, NoTls).unwrap();
                        let named = c.prepare_typed(text, types).unwrap();
                        c.batch_execute(&format!(
                            "PREPARE limit_claim (text, timestamptz, int8, text, int8, bool, int8) AS {text}"
                        ))
                        .unwrap();
                        let execute = "EXECUTE limit_claim('contended', \
                                       '2025-06-15 15:06:40+00', '60000000', 'x', '1', true, \
                                       '60000000')";
                        let once = |c: &mut Client| {
                            if way == Send::SimpleExecute {
                                // One Query message, text results.
                                let answer = c.simple_query(execute).unwrap();
                                assert!(answer.iter().any(|m| matches!(
                                    m,
                                    pgtenure::postgres::SimpleQueryMessage::Row(row)
                                        if row.get("token").is_none()
                                )));
                                return;
                            }
                            if way == Send::Protocol {
                                return super::at_once::claim(c, &named);
                            }
                            let rows = c.query_typed(execute, &[]);
                            assert!(rows.unwrap()[0].get::<_, Option<i64>>("token").is_none());
                        };
                        for _ in 0..20 {
                            once(&mut c);
                        }
                        barrier.wait();
                        let start = Instant::now();
                        let mut n = 0_u64;
                        while start.elapsed() < Duration::from_secs(secs) {
                            once(&mut c);
                            n += 1;
                        }
                        n as f64 / start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        counts.iter().sum()
    };
    // What taking each statement's connection from an r2d2 pool costs, on `SELECT 1`.
    let pool = r2d2::Pool::builder()
        .max_size(16)
        .test_on_check_out(false)
        .build(r2d2_postgres::PostgresConnectionManager::new(
            url.parse()?,
            NoTls,
        ))?;
    let select = |clients: usize, pooled: bool| -> f64 {
        let counts: Vec<f64> = thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut own = Client::connect(url, NoTls).unwrap();
                        let start = Instant::now();
                        let mut n = 0_u64;
                        while start.elapsed() < Duration::from_secs(secs) {
                            if pooled {
                                pool.get().unwrap().query_typed("SELECT 1", &[]).unwrap();
                            } else {
                                own.query_typed("SELECT 1", &[]).unwrap();
                            }
                            n += 1;
                        }
                        n as f64 / start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        counts.iter().sum()
    };
    // The refused tick claim, protocol-level, each call on a connection from the r2d2 pool (its
    // statement prepared once per pooled connection, kept in the connection's extensions, as the
    // library does): what the pool adds to the driver on the library's own statement.
    let claim_pool = r2d2::Pool::builder()
        .max_size(16)
        .test_on_check_out(false)
        .build(r2d2_postgres::PostgresConnectionManager::new(
            url.parse()?,
            NoTls,
        ))?;
    let pooled_claim = |clients: usize| -> f64 {
        let counts: Vec<f64> = thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    let (pool, text, types) = (&claim_pool, &text, &types);
                    s.spawn(move || {
                        let once = || {
                            let mut conn = pool.get().unwrap();
                            let named = match r2d2::PooledConnection::extensions(&conn)
                                .get::<pgtenure::postgres::Statement>()
                            {
                                Some(named) => named.clone(),
                                None => {
                                    let named = conn.prepare_typed(text, types).unwrap();
                                    r2d2::PooledConnection::extensions_mut(&mut conn)
                                        .insert(named.clone());
                                    named
                                }
                            };
                            super::at_once::claim(&mut conn, &named);
                        };
                        for _ in 0..20 {
                            once();
                        }
                        let start = Instant::now();
                        let mut n = 0_u64;
                        while start.elapsed() < Duration::from_secs(secs) {
                            once();
                            n += 1;
                        }
                        n as f64 / start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        counts.iter().sum()
    };
    let mut out = Vec::new();
    println!(
        "\nthe driver alone, one connection per client, median of {runs} runs: the refused tick \
         claim, and SELECT 1 on a connection of its own or from an r2d2 pool"
    );
    println!(
        "| clients | claim, protocol-level prepared/s | claim, protocol-level prepared, from an r2d2 \
         pool/s | claim, SQL-level EXECUTE (extended protocol)/s | claim, SQL-level EXECUTE \
         (simple query)/s | SELECT 1, own connection/s | SELECT 1, from an r2d2 pool/s |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &c in clients {
        let protocol = median((0..runs).map(|_| run(c, Send::Protocol)).collect());
        let protocol_pooled = median((0..runs).map(|_| pooled_claim(c)).collect());
        let execute = median((0..runs).map(|_| run(c, Send::Execute)).collect());
        let simple = median((0..runs).map(|_| run(c, Send::SimpleExecute)).collect());
        let own = median((0..runs).map(|_| select(c, false)).collect());
        let pooled = median((0..runs).map(|_| select(c, true)).collect());
        println!(
            "| {c} | {protocol:.0} | {protocol_pooled:.0} | {execute:.0} | {simple:.0} | {own:.0} \
             | {pooled:.0} |"
        );
        out.push(json!({
            "clients": c, "protocol_prepared": protocol,
            "protocol_prepared_pooled": protocol_pooled, "sql_execute": execute,
            "sql_execute_simple_query": simple,
            "select_1_own_connection": own, "select_1_pooled": pooled,
        }));
    }
    Ok(Value::Array(out))
}
