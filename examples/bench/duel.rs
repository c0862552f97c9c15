//! The cases the filter keeps, **all at the same time in this process**, each with the clients
//! given: `--only duel`. With `PGTENURE_BENCH_CASES="semaphore acquire"` the library's refused
//! permit and the driver alone sending the same statement share the machine at every moment, in
//! threads of one process under one scheduler: their ratio is what the library adds to the driver,
//! free of the host's drift and of the difference between threads and pgbench's processes.

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cases::kept_cases;
use super::compare::median;
use super::Error;

/// Runs the kept cases at once, `runs` times for `secs` seconds; the first case is the reference
/// each other's ratio is taken to.
pub fn run(url: &str, clients: usize, secs: u64, runs: usize) -> Result<Value, Error> {
    let (db, (cases, tables, leasers)) = kept_cases(url)?;
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for run in 0..runs {
        let barrier = Barrier::new(clients * cases.len());
        let counts: Vec<Vec<(f64, f64)>> = thread::scope(|s| {
            let handles: Vec<Vec<_>> = cases
                .iter()
                .enumerate()
                .map(|(k, case)| {
                    let lib = &case.lib;
                    (0..clients)
                        .map(|t| {
                            let (barrier, db) = (&barrier, &db);
                            let name = format!("duel-{k}-{t}");
                            thread::Builder::new()
                                .name(name)
                                .spawn_scoped(s, move || {
                                    let mut op = lib(db, t, 2_000_000 + run as u64);
                                    for i in 0..20 {
                                        op(u64::MAX / 2 + i);
                                    }
                                    barrier.wait();
                                    let cpu = thread_cpu();
                                    let until = Instant::now() + Duration::from_secs(secs);
                                    let mut i = 0;
                                    while Instant::now() < until {
                                        op(i);
                                        i += 1;
                                    }
                                    (
                                        i as f64 / secs as f64,
                                        (thread_cpu() - cpu) / i.max(1) as f64,
                                    )
                                })
                                .expect("a client thread")
                        })
                        .collect()
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.into_iter().map(|h| h.join().unwrap()).collect())
                .collect()
        });
        let line: Vec<String> = cases
            .iter()
            .zip(&counts)
            .zip(rates.iter_mut().zip(&mut cpus))
            .map(|((case, per_thread), (rates, cpus))| {
                let rate: f64 = per_thread.iter().map(|(rate, _)| rate).sum();
                let cpu = median(per_thread.iter().map(|(_, cpu)| *cpu).collect());
                rates.push(rate);
                cpus.push(cpu);
                format!("{} {rate:.0} ({cpu:.1} us CPU per call)", case.name)
            })
            .collect();
        eprintln!("duel run {} of {runs}: {}", run + 1, line.join(" / "));
    }
    println!(
        "\nduel: every case at once, {clients} clients each, median of {runs} runs of {secs} s"
    );
    let mut out = Vec::new();
    for ((case, runs), cpu) in cases.iter().zip(&rates).zip(&cpus) {
        let ratio = median(runs.iter().zip(&rates[0]).map(|(r, f)| r / f).collect());
        let cpu = median(cpu.clone());
        println!(
            "| {} | {:.0}/s | {ratio:.3} of the first | {cpu:.1} us client CPU per call |",
            case.name,
            median(runs.clone())
        );
        out.push(json!({ "operation": case.name, "runs": runs, "ratio_to_first": ratio, "client_cpu_us": cpu }));
    }
    drop(leasers);
    tables.drop_all(url)?;
    Ok(json!(out))
}

/// This thread's CPU time so far, in microseconds.
fn thread_cpu() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
}
