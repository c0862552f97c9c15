//! Membership convergence for totals that do not divide evenly: rounds until every live process
//! holds floor or ceil of total / processes, and units moved against the fewest that could move.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::postgres::Client;
use pgtenure::Db;
use serde_json::{json, Value};

use super::common::Quiet;
use super::Error;

/// One fleet of `processes` leasers sharing `total` units, in tables of its own.
struct Shape<'a> {
    db: &'a Db,
    procs_t: String,
    units_t: String,
    total: usize,
    leasers: Vec<Leaser>,
}

impl Shape<'_> {
    fn new<'a>(db: &'a Db, name: &str, total: usize, processes: usize) -> Result<Shape<'a>, Error> {
        let id = std::process::id();
        let (procs_t, units_t) = (
            format!("bench_procs_{name}_{id}"),
            format!("bench_units_{name}_{id}"),
        );
        let units = Units::new(db).with_tables(&procs_t, &units_t)?;
        units.create_tables()?;
        let all: Vec<Unit> = (0..total)
            .map(|i| Unit::new(&format!("tenant-{}", i % 10), i as i32))
            .collect::<Result<_, _>>()?;
        units.add(&all)?;
        let mut shape = Shape {
            db,
            procs_t,
            units_t,
            total,
            leasers: Vec::new(),
        };
        for _ in 0..processes {
            shape.join()?;
        }
        Ok(shape)
    }

    fn join(&mut self) -> Result<(), Error> {
        let mut config = super::common::hand_driven();
        config.ttl = Duration::from_secs(2);
        config.heartbeat_interval = Duration::from_millis(500);
        let leaser = Leaser::new(self.db, Arc::new(Quiet), config)?
            .with_tables(&self.procs_t, &self.units_t)?;
        leaser.heartbeat()?;
        self.leasers.push(leaser);
        Ok(())
    }

    /// Who owns each unit, by the database.
    fn owners(&self, admin: &mut Client) -> Result<BTreeMap<(String, i32), Option<String>>, Error> {
        let sql = format!(
            "SELECT tenant, shard, process_id::text FROM \"{}\"",
            self.units_t
        );
        Ok(admin
            .query(&sql, &[])?
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect())
    }

    /// Rounds (each live leaser heartbeats and ticks) until the balance is exact, at most 20.
    fn rounds_to_exact(&self) -> Result<(usize, Vec<usize>), Error> {
        let floor = self.total / self.leasers.len();
        for round in 1..=20 {
            let mut counts = Vec::new();
            for l in &self.leasers {
                l.heartbeat()?;
                counts.push(l.tick()?.owned);
            }
            let exact = counts.iter().sum::<usize>() == self.total
                && counts.iter().all(|c| *c == floor || *c == floor + 1);
            if exact {
                return Ok((round, counts));
            }
        }
        Ok((21, Vec::new()))
    }

    /// Runs a change and measures it: rounds to exact balance, units moved, the fewest possible.
    fn measure(
        &mut self,
        admin: &mut Client,
        change: &str,
        minimum: usize,
        rows: &mut Vec<Value>,
    ) -> Result<(), Error> {
        let before = self.owners(admin)?;
        let started = Instant::now();
        let (rounds, counts) = self.rounds_to_exact()?;
        let after = self.owners(admin)?;
        let moved = after
            .iter()
            .filter(|(u, o)| before.get(*u) != Some(*o))
            .count();
        let (lo, hi) = (
            counts.iter().min().copied().unwrap_or(0),
            counts.iter().max().copied().unwrap_or(0),
        );
        println!(
            "| {:>5} | {:>5} | {change:<28} | {rounds:>6} | {:<7} | {moved:>5} | {minimum:>7} |",
            self.total,
            self.leasers.len(),
            format!("{lo}-{hi}"),
        );
        rows.push(json!({
            "units": self.total, "processes": self.leasers.len(), "change": change,
            "rounds_to_exact": rounds, "secs": started.elapsed().as_secs_f64(),
            "min_owned": lo, "max_owned": hi, "units_moved": moved, "fewest_possible": minimum,
        }));
        Ok(())
    }

    /// Stops heartbeating the last `n` leasers and waits until their rows expire, the others
    /// heartbeating meanwhile; returns how many units the departed owned.
    fn crash(&mut self, admin: &mut Client, n: usize) -> Result<usize, Error> {
        let crashed: Vec<Leaser> = self.leasers.split_off(self.leasers.len() - n);
        let ids: Vec<String> = crashed.iter().map(|l| l.process_id().to_owned()).collect();
        let owned = self
            .owners(admin)?
            .values()
            .filter(|o| o.as_ref().is_some_and(|o| ids.contains(o)))
            .count();
        let sql = format!(
            "SELECT count(*) FROM \"{}\" WHERE process_id::text = ANY($1) AND expires_at > now()",
            self.procs_t
        );
        loop {
            for l in &self.leasers {
                l.heartbeat()?;
            }
            let left: i64 = admin.query_one(&sql, &[&ids])?.get(0);
            if left == 0 {
                return Ok(owned);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn drop_tables(self, admin: &mut Client) -> Result<(), Error> {
        for l in &self.leasers {
            let _ = l.release();
            let _ = l.delete_process();
        }
        admin.batch_execute(&format!(
            "DROP TABLE \"{}\"; DROP TABLE \"{}\"",
            self.units_t, self.procs_t
        ))?;
        Ok(())
    }
}

/// The table of uneven shapes: 3 units on 2 processes, 1,001 on 8 (a join, a graceful leave, a
/// crash), 310 on 40 with 10 crashing at once.
pub fn uneven(db: &Db, admin: &mut Client) -> Result<Value, Error> {
    println!("\nmembership convergence, uneven totals (exact: floor or ceil of units / processes)");
    println!(
        "| units | procs | change                       | rounds | owned   | moved | fewest  |"
    );
    println!(
        "| ----: | ----: | :--------------------------- | -----: | :------ | ----: | ------: |"
    );
    let mut rows = Vec::new();

    let mut small = Shape::new(db, "s3", 3, 2)?;
    small.measure(admin, "start", 3, &mut rows)?;
    small.drop_tables(admin)?;

    let mut mid = Shape::new(db, "s1001", 1001, 8)?;
    mid.measure(admin, "start", 1001, &mut rows)?;
    mid.join()?;
    mid.measure(admin, "a ninth joins", 1001 / 9, &mut rows)?;
    let leaving = mid.leasers.pop().expect("nine");
    let its = mid
        .owners(admin)?
        .values()
        .filter(|o| o.as_deref() == Some(leaving.process_id()))
        .count();
    leaving.release()?;
    leaving.delete_process()?;
    mid.measure(admin, "one leaves gracefully", its, &mut rows)?;
    let departed = mid.crash(admin, 1)?;
    mid.measure(admin, "one crashes (after its TTL)", departed, &mut rows)?;
    mid.drop_tables(admin)?;

    let mut large = Shape::new(db, "s310", 310, 40)?;
    large.measure(admin, "start", 310, &mut rows)?;
    let departed = large.crash(admin, 10)?;
    large.measure(admin, "10 of 40 crash at once", departed, &mut rows)?;
    large.drop_tables(admin)?;
    Ok(json!(rows))
}
