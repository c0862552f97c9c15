//! Round trips of every operation, counted at the protocol level through a proxy.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{db, Names, Tables};
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, DbBuilder,
    StatementMode,
};

use crate::common::Quiet;

#[test]
fn every_operation_is_one_round_trip_in_each_statement_mode() {
    for mode in [
        StatementMode::Auto,
        StatementMode::Protocol,
        StatementMode::Sql,
        StatementMode::Unprepared,
    ] {
        every_operation_is_one_round_trip_in(mode);
    }
}

/// Each operation's round trips on a pool of one connection in `mode`, through a proxy (where
/// `Auto` finds no proof: SQL-level).
fn every_operation_is_one_round_trip_in(mode: StatementMode) {
    let prepares = mode != StatementMode::Unprepared;
    // The mode that asks the session where it runs does so at the connection's first statement.
    let asks = matches!(mode, StatementMode::Auto | StatementMode::Protocol);
    let mut tables = Tables::new();
    let Names {
        tick: tick_t,
        fire: fire_t,
        lease: lease_t,
        leader: leader_t,
        procs: procs_t,
        units: units_t,
        ..
    } = tables.every_primitive();
    TickClaims::new(&db())
        .with_table(&tick_t)
        .unwrap()
        .create_table()
        .unwrap();
    FireClaims::new(&db())
        .with_table(&fire_t)
        .unwrap()
        .create_table()
        .unwrap();
    Leases::new(&db())
        .with_table(&lease_t)
        .unwrap()
        .create_table()
        .unwrap();
    Elector::new(&db())
        .with_table(&leader_t)
        .unwrap()
        .create_table()
        .unwrap();
    Units::new(&db())
        .with_tables(&procs_t, &units_t)
        .unwrap()
        .create_tables()
        .unwrap();

    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config())
        .max_size(1)
        .unwrap()
        .statement_mode(mode)
        .build()
        .unwrap();
    let ticks = TickClaims::new(&via).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&via).with_table(&fire_t).unwrap();
    let leases = Leases::new(&via).with_table(&lease_t).unwrap();
    let elector = Elector::new(&via).with_table(&leader_t).unwrap();
    let units = Units::new(&via).with_tables(&procs_t, &units_t).unwrap();
    let leaser = Leaser::new(&via, Arc::new(Quiet), crate::common::hand_driven())
        .unwrap()
        .with_tables(&procs_t, &units_t)
        .unwrap();

    // Each operation twice, on other keys the second time: the first use of a statement on a
    // connection also prepares it (one more round trip); from then on, one round trip each.
    let mut passes: Vec<Vec<(&str, u64)>> = Vec::new();
    for pass in 0..2_i32 {
        let mut measured: Vec<(&str, u64)> = Vec::new();
        let mut measure = |name: &'static str, f: &mut dyn FnMut()| {
            let before = proxy.round_trips();
            f();
            measured.push((name, proxy.round_trips() - before));
        };
        let key = |name: &str| format!("{name}{pass}");
        let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut won = None;
        measure("tick claim (won)", &mut || {
            won = ticks
                .claim(&key("job"), tick, Duration::from_secs(60))
                .unwrap()
        });
        measure("tick claim (refused)", &mut || {
            assert!(ticks
                .claim(&key("job"), tick, Duration::from_secs(60))
                .unwrap()
                .is_none())
        });
        let mut claim = won.take();
        measure("tick release", &mut || {
            claim.take().unwrap().release().unwrap()
        });
        measure("fire claim (won)", &mut || {
            assert!(fires.claim(&key("f@")).unwrap())
        });
        measure("fire claim (refused)", &mut || {
            assert!(!fires.claim(&key("f@")).unwrap())
        });
        measure("fire purge", &mut || {
            fires.purge(Duration::ZERO).unwrap();
        });
        measure("lease try_acquire", &mut || {
            assert!(leases
                .try_acquire(&key("a"), Duration::from_secs(60))
                .unwrap()
                .is_some())
        });
        measure("lease try_acquire (refused)", &mut || {
            let other = Leases::new(&via).with_table(&lease_t).unwrap();
            assert!(other
                .try_acquire(&key("a"), Duration::from_secs(60))
                .unwrap()
                .is_none());
        });
        measure("lease renew (batch of 3)", &mut || {
            leases
                .renew(
                    &[&*key("a"), &*key("b"), &*key("c")],
                    Duration::from_secs(60),
                )
                .unwrap();
        });
        measure("lease supersede", &mut || {
            assert!(leases.supersede(&key("a")).unwrap())
        });
        measure("lease release", &mut || {
            assert!(leases.release(&key("a")).unwrap())
        });
        let mut lease = None;
        measure("managed lease acquire", &mut || {
            lease = leases.acquire(&key("m"), Duration::from_secs(60)).unwrap()
        });
        let token = lease.as_ref().unwrap().token();
        measure(
            "lease try_acquire (refused: a managed tenure of this owner name)",
            &mut || {
                let twin = Leases::new(&via)
                    .with_table(&lease_t)
                    .unwrap()
                    .with_owner(leases.owner())
                    .unwrap();
                assert!(twin
                    .try_acquire(&key("m"), Duration::from_secs(60))
                    .unwrap()
                    .is_none());
            },
        );
        let mut conn = via.connection().unwrap();
        let mut tx = conn.transaction().unwrap();
        measure("lease fence (in a transaction)", &mut || {
            assert!(leases.fence(&mut tx, &key("m"), token).unwrap())
        });
        tx.commit().unwrap();
        drop(conn);
        measure("managed lease release", &mut || {
            lease.take().unwrap().release().unwrap()
        });
        measure("elector is_leader", &mut || {
            assert!(elector.is_leader().unwrap())
        });
        measure("elector leader", &mut || {
            assert!(elector.leader().unwrap().is_some())
        });
        measure("elector resign", &mut || elector.resign().unwrap());
        let shard = |i: i32| Unit::new("t", 10 * pass + i).unwrap();
        measure("units add (batch of 3)", &mut || {
            units.add(&[shard(1), shard(2), shard(3)]).unwrap();
        });
        measure("units set_weight", &mut || {
            assert!(units.set_weight(&shard(3), 2).unwrap())
        });
        measure("membership heartbeat", &mut || leaser.heartbeat().unwrap());
        measure("membership sweep", &mut || {
            leaser.sweep().unwrap();
        });
        measure("membership release", &mut || {
            leaser.release().unwrap();
        });
        measure("membership delete_process", &mut || {
            leaser.delete_process().unwrap()
        });
        passes.push(measured);
    }
    for (first, steady) in passes[0].iter().zip(&passes[1]) {
        println!(
            "{mode}: {} round trip(s) at first use, then {}: {}",
            first.1, steady.1, first.0
        );
    }
    for (i, (name, trips)) in passes[0].iter().enumerate() {
        // The fence runs unprepared inside the caller's transaction; the managed lease's acquire
        // and release ran their statements on this connection before (try_acquire, release). The
        // first grant of a table on a Db also reads its promotion record (prepared too): once.
        let statements = match *name {
            "lease try_acquire" | "elector is_leader" => 2,
            _ => 1,
        };
        // A handle's first statement on a table also reads the table's schema version, once per
        // Db and table (the units' check covers the processes table too): one catalog read each,
        // the same statement for every table, so prepared (one more) at its first use only.
        let checks = match *name {
            "tick claim (won)" | "fire claim (won)" | "lease try_acquire" | "elector is_leader" => {
                1
            }
            "units add (batch of 3)" => 2,
            _ => 0,
        };
        let most = statements * if prepares { 2 } else { 1 }
            + checks
            + u64::from(prepares && i == 0)
            + u64::from(asks && i == 0);
        assert!(
            *trips <= most,
            "{mode}: {name} took {trips} round trips at first use: the session's question at the \
             connection's first statement, PREPARE and EXECUTE at most (and the promotion \
             record's, at a table's first grant; the schema version's, at a table's first use)"
        );
    }
    for (name, trips) in &passes[1] {
        assert_eq!(*trips, 1, "{mode}: {name} took {trips} round trips");
    }
    // Every statement was prepared once on this one connection.
    let prepared = passes[0].iter().filter(|(_, trips)| *trips >= 2).count();
    if prepares {
        assert!(
            prepared >= 15,
            "{mode}: only {prepared} statements were prepared"
        );
    }
    // A tick is several statements: owned, stats, and one per claim batch (each prepared at its
    // first use).
    leaser.heartbeat().unwrap();
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 6);
    assert_eq!(
        proxy.round_trips() - before,
        if prepares { 6 } else { 3 },
        "{mode}: stats + owned + one claim batch, each prepared first"
    );
    units
        .add(
            &(100..103)
                .map(|s| Unit::new("t", s).unwrap())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 3);
    assert_eq!(
        proxy.round_trips() - before,
        2,
        "{mode}: stats + one claim batch (what it owns is known since the last tick)"
    );
    // In steady state a tick is one statement, whatever the number of units owned.
    let before = proxy.round_trips();
    assert_eq!(leaser.tick().unwrap().claimed, 0);
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "{mode}: a steady tick reads only the stats"
    );
}
