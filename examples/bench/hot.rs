//! A fixed number of refused calls on one client, and nothing else: the loop to run under
//! `valgrind --tool=callgrind` (instruction counts repeat under load, where wall-clock ratios on a
//! shared machine do not). Run it at two counts: the difference divided by the difference in
//! counts is the cost of one operation, without the set-up.
//!
//! `valgrind --tool=callgrind target/release/examples/bench --only hot-loop --iterations 2000`
//! counts refused tick claims; `PGTENURE_BENCH_HOT=permit` counts refused permits instead, and
//! `PGTENURE_BENCH_HOT=driver` the refused tick claim sent by the driver alone on a connection of
//! its own (the statement prepared once): what pgtenure adds is the difference;
//! `PGTENURE_BENCH_HOT=permit-driver` the refused permit's statement sent by the driver alone.

use std::time::{Duration, SystemTime};

use pgtenure::postgres::{Client, NoTls};
use pgtenure::semaphores::Semaphore;
use pgtenure::tick_claims::TickClaims;
use pgtenure::DbBuilder;

use super::at_once::{claim, CLAIM_TYPES};
use super::cases::{sql, PERMIT_TYPES};
use super::Error;

/// Runs `iterations` refused calls (which, by `PGTENURE_BENCH_HOT`) on a pool of one connection,
/// on a table of its own (dropped at the end).
pub fn refused(url: &str, iterations: u64) -> Result<(), Error> {
    let db = DbBuilder::from_config(url.parse()?).max_size(1)?.build()?;
    let table = format!("bench_hot_{}", std::process::id());
    let what = std::env::var("PGTENURE_BENCH_HOT").unwrap_or_default();
    if what.starts_with("permit") {
        let semaphores = Semaphore::new(&db).with_table(&table)?;
        semaphores.create_table()?;
        let held = semaphores.acquire("contended", 1, Duration::from_secs(3600))?;
        if what == "permit-driver" {
            let mut client = Client::connect(url, NoTls)?;
            let text = sql("semaphores/acquire.sql", &[("table", &table)]);
            let named = client.prepare_typed(&text, &PERMIT_TYPES)?;
            let none: Option<SystemTime> = None;
            for _ in 0..iterations {
                let rows = client.query(
                    &named,
                    &[
                        &"contended",
                        &"driver",
                        &60_000_000_i64,
                        &1_i32,
                        &true,
                        &true,
                        &1_i64,
                        &none,
                        &none,
                    ],
                )?;
                assert!(rows.is_empty(), "the only permit is held");
            }
        } else {
            let other = Semaphore::new(&db).with_table(&table)?;
            for _ in 0..iterations {
                let permit = other.acquire("contended", 1, Duration::from_secs(60))?;
                assert!(permit.is_none(), "the only permit is held");
            }
        }
        drop(held);
    } else {
        let claims = TickClaims::new(&db).with_table(&table)?;
        claims.create_table()?;
        let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
        claims.claim("contended", taken, Duration::from_secs(3600))?;
        if what == "driver" {
            let mut client = Client::connect(url, NoTls)?;
            let text = sql("tick_claims/claim.sql", &[("table", &table)]);
            let named = client.prepare_typed(&text, &CLAIM_TYPES)?;
            for _ in 0..iterations {
                claim(&mut client, &named);
            }
        } else {
            for _ in 0..iterations {
                let won = claims.claim("contended", taken, Duration::from_secs(60))?;
                assert!(won.is_none(), "the tick is held for an hour");
            }
        }
    }
    let mut conn = db.connection()?;
    conn.batch_execute(&format!(
        "DROP TABLE IF EXISTS \"{table}\", \"{table}_promotion\";
         DROP SEQUENCE IF EXISTS \"{table}_token_seq\""
    ))?;
    println!("{iterations} refused calls ({what:?}) on one client");
    Ok(())
}
