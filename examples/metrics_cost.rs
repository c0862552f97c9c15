//! What the feature `metrics` costs the calling process per operation, in instructions: a fixed
//! number of refused tick claims and follower polls, to run under callgrind (which counts
//! instructions, the same whatever else the machine does), once without a recorder and once with
//! `metrics-exporter-prometheus`'s:
//!
//! ```sh
//! cargo build --release --example metrics_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/none.out target/release/examples/metrics_cost 2000
//! PGTENURE_METRICS_RECORDER=prometheus valgrind --tool=callgrind --callgrind-out-file=/tmp/prom.out \
//!     target/release/examples/metrics_cost 2000
//! ```
//!
//! and compare the two totals (with a run of 0 operations for the fixed cost). Against
//! `DATABASE_URL`, or a throwaway server.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, SystemTime};

use pgtenure::{elector::Elector, tick_claims::TickClaims, Db};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map_or(Ok(2000), |n| n.parse())?;
    if std::env::var("PGTENURE_METRICS_RECORDER").is_ok_and(|r| r == "prometheus") {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        metrics::set_global_recorder(recorder)?;
    }
    let db = Db::connect(&common::url())?;
    let suffix = std::process::id();
    let ticks = TickClaims::new(&db).with_table(&format!("t_metrics_cost_ticks_{suffix}"))?;
    ticks.create_table()?;
    let leader = format!("t_metrics_cost_leader_{suffix}");
    let elector = |holder: &str| -> Result<Elector, pgtenure::Error> {
        Elector::new(&db)
            .with_table(&leader)?
            .with_holder(holder)?
            .with_ttl(Duration::from_secs(600))
    };
    let (leading, following) = (elector("leading")?, elector("following")?);
    leading.create_table()?;
    let tick = SystemTime::now() - Duration::from_secs(60);
    ticks.claim("job", tick, Duration::from_secs(600))?;
    assert!(leading.is_leader()?);
    for _ in 0..n {
        assert!(ticks
            .claim("job", tick, Duration::from_secs(600))?
            .is_none());
        assert!(!following.is_leader()?);
    }
    let mut client =
        pgtenure::postgres::Client::connect(&common::url(), pgtenure::postgres::NoTls)?;
    client.batch_execute(&format!(
        "DROP TABLE t_metrics_cost_ticks_{suffix}; DROP TABLE {leader}, {leader}_promotion; \
         DROP SEQUENCE {leader}_term_seq"
    ))?;
    Ok(())
}
