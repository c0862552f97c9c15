//! A fixed number of refused tick claims on one client, and nothing else: the loop to run under
//! `valgrind --tool=callgrind` (instruction counts repeat under load, where wall-clock ratios on a
//! shared machine do not). Run it at two counts: the difference divided by the difference in
//! counts is the cost of one operation, without the set-up.
//!
//! `valgrind --tool=callgrind target/release/examples/bench --only hot-loop --iterations 2000`

use std::time::{Duration, SystemTime};

use pgtenure::tick_claims::TickClaims;
use pgtenure::DbBuilder;

use super::Error;

/// Runs `iterations` refused tick claims on a pool of one connection, on a table of its own
/// (dropped at the end).
pub fn refused_tick_claims(url: &str, iterations: u64) -> Result<(), Error> {
    let db = DbBuilder::from_config(url.parse()?).max_size(1)?.build()?;
    let table = format!("bench_hot_tick_{}", std::process::id());
    let claims = TickClaims::new(&db).with_table(&table)?;
    claims.create_table()?;
    let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    claims.claim("contended", taken, Duration::from_secs(3600))?;
    for _ in 0..iterations {
        let won = claims.claim("contended", taken, Duration::from_secs(60))?;
        assert!(won.is_none(), "the tick is held for an hour");
    }
    let mut conn = db.connection()?;
    conn.batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
    println!("{iterations} refused tick claims on one client");
    Ok(())
}
