//! Part 5: membership, units shared fairly as processes join and crash.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pgtenure::membership::{Config, Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::Db;

/// The tour's reconciler: it counts the losses it hears, by reason.
#[derive(Default)]
struct Tally(Mutex<Vec<(UnitLoss, usize)>>);

impl Reconciler for Tally {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, units: &[Unit], reason: UnitLoss) {
        let mut tally = self.0.lock().expect("the tally");
        match tally.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += units.len(),
            None => tally.push((reason, units.len())),
        }
    }
}

/// Processes share (tenant, shard) units; one joins, one crashes; each round converges to fair share.
pub fn membership(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_secs(1);
    println!("\n5. Membership: 48 units (4 tenants x 12 shards), fair share among live processes, TTL {ttl:?}");
    let (processes, units_table) = (
        format!("pgtenure_tour_processes_{}", std::process::id()),
        format!("pgtenure_tour_units_{}", std::process::id()),
    );
    let units = Units::new(db).with_tables(&processes, &units_table)?;
    units.create_tables()?;
    let all: Vec<Unit> = ["acme", "globex", "initech", "umbrella"]
        .iter()
        .flat_map(|t| (0..12).map(move |s| Unit::new(t, s)))
        .collect::<Result<_, _>>()?;
    units.add(&all)?;
    let mut config = Config::default();
    config.ttl = ttl;
    config.heartbeat_interval = ttl / 4;
    // Rounds driven by hand, one line each: claim from the first. (By default a process counts,
    // and claims, from its second heartbeat, so that a crash-looping slot never takes units from
    // the healthy processes and processes started together each claim their share once.)
    config.warm_up = Some(Duration::ZERO);
    let tally = Arc::new(Tally::default());
    let leasers: Vec<Leaser> = (0..4)
        .map(|_| {
            Leaser::new(db, tally.clone(), config.clone())?.with_tables(&processes, &units_table)
        })
        .collect::<Result<_, _>>()?;
    println!(
        "   {:<26} {:>4} {:>4} {:>4} {:>4}   fair share",
        "round", "p1", "p2", "p3", "p4"
    );
    let mut alive = [true, true, true, false];
    let show = |label: &str, alive: &[bool; 4]| -> Result<(), pgtenure::Error> {
        let mut fair = 0;
        for (leaser, _) in leasers.iter().zip(alive).filter(|(_, a)| **a) {
            leaser.heartbeat()?;
            fair = leaser.tick()?.fair_share;
        }
        let cells: Vec<String> = leasers
            .iter()
            .zip(alive)
            .map(|(l, a)| {
                if *a {
                    l.owned().len().to_string()
                } else {
                    "-".to_owned()
                }
            })
            .collect();
        println!(
            "   {label:<26} {:>4} {:>4} {:>4} {:>4}   {fair}",
            cells[0], cells[1], cells[2], cells[3]
        );
        Ok(())
    };
    for leaser in &leasers[..3] {
        leaser.heartbeat()?; // three processes are up
    }
    show("1: three processes", &alive)?;
    show("2", &alive)?;
    alive[3] = true;
    show("3: p4 joins", &alive)?;
    show("4", &alive)?;
    alive[1] = false;
    let crashed = Instant::now();
    let p2_unit = leasers[1].owned()[0].clone();
    let p2_token = leasers[1].token(&p2_unit).expect("p2 owns it");
    show("5: p2 crashes (silent)", &alive)?;
    let mut round = 6;
    while crashed.elapsed() < ttl + ttl / 2 {
        thread::sleep(ttl / 2);
        show(
            &format!("{round}: {:.1?} after the crash", crashed.elapsed()),
            &alive,
        )?;
        round += 1;
    }
    let owned: usize = leasers
        .iter()
        .zip(&alive)
        .filter(|(_, a)| **a)
        .map(|(l, _)| l.owned().len())
        .sum();
    println!(
        "   the three live processes own {owned} of 48 units; p2's were claimed after its TTL"
    );
    // p2 wakes up and tries to write for a unit it owned: its fence refuses; the new owner's passes.
    let row = units
        .assignments()?
        .into_iter()
        .find(|a| a.unit == p2_unit)
        .expect("registered");
    let new_owner = leasers
        .iter()
        .find(|l| Some(l.process_id()) == row.owner.as_deref())
        .expect("a live owner");
    let mut conn = db.connection()?;
    let mut tx = conn.transaction()?;
    println!(
        "   unit {p2_unit}: p2's fence (token {p2_token}) passes: {}; its new owner's (token {:?}): {}",
        leasers[1].fence(&mut tx, &p2_unit)?,
        row.token,
        new_owner.fence(&mut tx, &p2_unit)?
    );
    tx.commit()?;
    for (leaser, _) in leasers.iter().zip(&alive).filter(|(_, a)| **a) {
        leaser.release()?;
        leaser.delete_process()?;
    }
    let told: Vec<String> = tally
        .0
        .lock()
        .expect("the tally")
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    println!("   units_lost was told, by reason: {}", told.join(", "));
    db.connection()?
        .batch_execute(&format!("DROP TABLE {processes}; DROP TABLE {units_table}"))?;
    Ok(())
}
