//! The operations through PgBouncer in transaction pooling mode, with the harness's `PgBouncer`.

mod common;

use std::time::{Duration, SystemTime};

use common::{client, Tables};
use pgtenure::testing::PgBouncer;
use pgtenure::{Db, Elector, FireClaims, Leases, TickClaims};

#[test]
fn every_primitive_works_through_pgbouncer_in_transaction_mode() {
    let bouncer = PgBouncer::start(&common::url()).unwrap();
    // Db::connect sends the READ COMMITTED option; this PgBouncer ignores `options`.
    let db = Db::connect(bouncer.url()).unwrap();
    let mut tables = Tables::new();
    let (tick_t, fire_t, lease_t, leader_t) = (
        tables.name("tick"),
        tables.name("fire"),
        tables.name("lease"),
        tables.name("leader"),
    );
    let ticks = TickClaims::new(&db).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&db).with_table(&fire_t).unwrap();
    let leases = Leases::new(&db).with_table(&lease_t).unwrap();
    let elector = Elector::new(&db).with_table(&leader_t).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    leases.create_table().unwrap();
    elector.create_table().unwrap();
    // Many operations from many threads over few server connections: no named statement to collide.
    let t = (tick_t.clone(), lease_t.clone(), bouncer.url().to_owned());
    let results = common::race(8, move |i| {
        let db = Db::connect(&t.2).unwrap();
        let ticks = TickClaims::new(&db).with_table(&t.0).unwrap();
        let leases = Leases::new(&db).with_table(&t.1).unwrap();
        let mut won = Vec::new();
        for n in 0..50 {
            let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
            if let Some(claim) = ticks.claim("job", tick, Duration::from_secs(60)).unwrap() {
                claim.release().unwrap();
                won.push(n);
            }
            if let Some(lease) = leases
                .acquire(
                    &format!("k{}", (i + n as usize) % 3),
                    Duration::from_millis(300),
                )
                .unwrap()
            {
                lease.release().unwrap();
            }
        }
        won
    });
    // At most once each: a tick refused while the previous one is busy is skipped by design.
    let mut won: Vec<u64> = results.into_iter().flatten().collect();
    let wins = won.len();
    won.sort_unstable();
    won.dedup();
    assert_eq!(won.len(), wins, "a tick was won twice");
    assert!(wins >= 10, "only {wins} of 50 ticks won");
    assert!(fires.claim("f@1").unwrap());
    assert!(!fires.claim("f@1").unwrap());
    assert!(elector.is_leader().unwrap());
    assert!(elector.leader().unwrap().is_some());
    elector.resign().unwrap();
    assert_eq!(common::count(&mut client(), &tick_t), 1);
    let token: i64 = client()
        .query_one(&format!("SELECT token FROM {tick_t}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(token as usize, wins, "one token per win");
}
