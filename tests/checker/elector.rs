//! The elector under faults: campaigning members write term-fenced while leadership changes hands
//! (faults, resignation requests, a member stopping and campaigning again).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::{elector::Elector, Db};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{ledger, Tables};
use crate::harness::{
    assert_landed, inject_faults, mode, proxied_url, run_for, write, Counts, Load, Rng,
};

/// Time enough, under faults and load, for a successor to be elected and write after a leader
/// stepped down (a lost resignation waits out the 300 ms TTL).
const HANDOVER_TIME: Duration = Duration::from_secs(2);

#[test]
fn electors_under_random_faults_never_have_two_leaders_writing() {
    let mut tables = Tables::new();
    let table = tables.name("leader");
    let ledger = ledger::create(&mut tables);
    Elector::new(&crate::common::db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let app = tables.name("electors");
    let pool = |i: usize| {
        Db::builder(&proxied_url(&proxy, &app))
            .unwrap()
            .connection_timeout(Duration::from_secs(2))
            .unwrap()
            .statement_mode(mode(i))
            .build()
            .unwrap()
    };
    let dbs: Vec<Db> = (0..3).map(pool).collect();
    let duration = run_for();
    let until = Instant::now() + duration;
    let counts = Arc::new(Counts::default());
    // The terms in which a leader asked to step down or stopped, early enough for a successor to
    // write before the end (the liveness check below asks for as many changes, up to 3).
    let asked = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let _load = Load::start(2);
    let pollers: Vec<_> = (0..4)
        .map(|i| {
            let (db, table, ledger, counts, asked) = (
                dbs[i as usize % dbs.len()].clone(),
                table.clone(),
                ledger.clone(),
                counts.clone(),
                asked.clone(),
            );
            thread::spawn(move || {
                let holder = format!("elector-{i}");
                let e = Elector::new(&db)
                    .with_table(&table)
                    .unwrap()
                    .with_holder(&holder)
                    .unwrap()
                    .with_ttl(Duration::from_millis(300))
                    .unwrap()
                    .with_retry_period(Duration::from_millis(100))
                    .unwrap();
                let mut rng = Rng::new(i);
                let mut campaign = e.campaign().ok();
                while Instant::now() < until {
                    let Some(leading) = &campaign else {
                        // The first poll failed for good (it does not: faults are transient).
                        campaign = e.campaign().ok();
                        // Real time is the subject: a campaign retried 20-80 ms later, as a worker paces it.
                        thread::sleep(rng.millis(20, 80));
                        continue;
                    };
                    if let Some(term) = leading.term() {
                        write(&db, &ledger, "leader", term, &holder, &counts, |tx| {
                            e.fence(tx, term)
                        });
                        let handover = rng.below(40);
                        if handover < 2 && Instant::now() + HANDOVER_TIME < until {
                            asked.lock().insert(term);
                        }
                        match handover {
                            // Ask to step down (this member, as leader), or stop and campaign
                            // again.
                            0 => {
                                let _ = e.request_resign();
                            }
                            1 => {
                                let _ = campaign.take().map(pgtenure::elector::Leadership::stop);
                                campaign = e.campaign().ok();
                            }
                            _ => {}
                        }
                        // Now and then, write again after a stall, possibly past the term.
                        if rng.below(4) == 0 {
                            // Real time is the subject: a stall of 0-400 ms, possibly past the term.
                            thread::sleep(rng.millis(0, 400));
                            write(&db, &ledger, "leader", term, &holder, &counts, |tx| {
                                e.fence(tx, term)
                            });
                        }
                    }
                    // Real time is the subject: the worker's pace, a step every 20-80 ms.
                    thread::sleep(rng.millis(20, 80));
                }
                if let Some(campaign) = campaign {
                    let _ = campaign.stop();
                }
            })
        })
        .collect();
    let faults = inject_faults(&proxy, &app, &Mutex::new(Vec::new()), until, 7);
    for poller in pollers {
        poller.join().unwrap();
    }
    let proof = ledger::assert_ordered(&ledger);
    let asked = asked.lock().len();
    println!(
        "elector checker, {duration:?}, through campaigns: {} term-fenced writes over {} terms, {asked} terms ended by their leader in time for a successor, {} stale writes refused, {} failed by faults; faults: {faults:?}",
        proof.writes,
        proof.tenures,
        counts.refused.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst)
    );
    assert_landed(proof.writes, &counts);
    let changes = proof.tenures.saturating_sub(1);
    assert!(
        changes >= asked.min(3),
        "leadership changed hands only {changes} times, after leaders of {asked} terms stepped \
         down or stopped"
    );
}
