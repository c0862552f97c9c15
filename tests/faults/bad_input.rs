//! Every bad input is refused before any statement and changes nothing.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::{client, count, db, Names, Tables};
use pgtenure::membership::{Config, Leaser, Unit, Units};
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, Db,
    ErrorKind,
};

use crate::common::Quiet;

/// The bad-input matrix (docs/reliability.md, "Bad input"): every case is refused with `InvalidInput` before any
/// statement, or handled as documented, and nothing is stored or changed.
#[test]
fn bad_input_matrix_is_refused_before_any_statement_and_changes_nothing() {
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
    let ticks = TickClaims::new(&db()).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&db()).with_table(&fire_t).unwrap();
    let leases = Leases::new(&db()).with_table(&lease_t).unwrap();
    let elector = Elector::new(&db()).with_table(&leader_t).unwrap();
    let units = Units::new(&db()).with_tables(&procs_t, &units_t).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    leases.create_table().unwrap();
    elector.create_table().unwrap();
    units.create_tables().unwrap();
    let db_now: SystemTime = client().query_one("SELECT now()", &[]).unwrap().get(0);
    // The closures below borrow the handles.
    let (ticks, fires, leases, units) = (&ticks, &fires, &leases, &units);

    let long = "k".repeat(1025);
    let huge = "k".repeat(100_000);
    let bad_keys = ["", " ", "\t \n", "nul\0byte", long.as_str(), huge.as_str()];
    let year = Duration::from_secs(366 * 86_400);
    let bad_durations = [
        Duration::ZERO,
        Duration::from_micros(999),
        year * 101,
        Duration::MAX,
    ];
    let bad_tables = [
        "x; drop table y",
        "\"a\"",
        "a.b.c",
        &"t".repeat(64),
        "a'b",
        "a b",
        "1a",
        "",
        "a.",
    ];

    type Case<'a> = (String, Box<dyn Fn() -> pgtenure::Result<()> + 'a>);
    let mut cases: Vec<Case<'_>> = Vec::new();
    let minute = Duration::from_secs(60);
    for key in bad_keys {
        let shown = format!("{:?}", &key[..key.len().min(12)]);
        let tick = db_now;
        cases.push((
            format!("tick claim job {shown}"),
            Box::new(move || ticks.claim(key, tick, minute).map(|_| ())),
        ));
        cases.push((
            format!("fire claim {shown}"),
            Box::new(move || fires.claim(key).map(|_| ())),
        ));
        cases.push((
            format!("lease try_acquire {shown}"),
            Box::new(move || leases.try_acquire(key, minute).map(|_| ())),
        ));
        cases.push((
            format!("lease acquire {shown}"),
            Box::new(move || leases.acquire(key, minute).map(|_| ())),
        ));
        cases.push((
            format!("lease renew batch with {shown}"),
            Box::new(move || leases.renew(&["ok", key], minute).map(|_| ())),
        ));
        cases.push((
            format!("lease release {shown}"),
            Box::new(move || leases.release(key).map(|_| ())),
        ));
        cases.push((
            format!("lease supersede {shown}"),
            Box::new(move || leases.supersede(key).map(|_| ())),
        ));
        cases.push((
            format!("elector name {shown}"),
            Box::new(move || Elector::new(&db()).with_name(key).map(|_| ())),
        ));
        cases.push((
            format!("elector holder {shown}"),
            Box::new(move || Elector::new(&db()).with_holder(key).map(|_| ())),
        ));
        cases.push((
            format!("lease owner {shown}"),
            Box::new(move || Leases::new(&db()).with_owner(key).map(|_| ())),
        ));
        cases.push((
            format!("unit tenant {shown}"),
            Box::new(move || Unit::new(key, 1).map(|_| ())),
        ));
        let unit = Unit {
            tenant: key.to_owned(),
            shard: 1,
        };
        let u2 = unit.clone();
        cases.push((
            format!("units add {shown}"),
            Box::new(move || units.add(std::slice::from_ref(&u2)).map(|_| ())),
        ));
        cases.push((
            format!("units set_weight {shown}"),
            Box::new(move || units.set_weight(&unit, 1).map(|_| ())),
        ));
    }
    for d in bad_durations {
        cases.push((
            format!("tick busy_for {d:?}"),
            Box::new(move || ticks.claim("job", db_now, d).map(|_| ())),
        ));
        cases.push((
            format!("fire ttl {d:?}"),
            Box::new(move || FireClaims::new(&db()).with_ttl(d).map(|_| ())),
        ));
        cases.push((
            format!("lease ttl {d:?}"),
            Box::new(move || leases.try_acquire("k", d).map(|_| ())),
        ));
        cases.push((
            format!("elector ttl {d:?}"),
            Box::new(move || Elector::new(&db()).with_ttl(d).map(|_| ())),
        ));
    }
    cases.push((
        "managed lease ttl 29ms".into(),
        Box::new(|| leases.acquire("k", Duration::from_millis(29)).map(|_| ())),
    ));
    cases.push((
        "purge older than 101 years".into(),
        Box::new(|| fires.purge(year * 101).map(|_| ())),
    ));
    cases.push((
        "negative unit weight".into(),
        Box::new(|| {
            units
                .set_weight(&Unit::new("t", 1).unwrap(), -1)
                .map(|_| ())
        }),
    ));
    for ahead in [Duration::from_secs(120), year * 50] {
        cases.push((
            format!("tick {ahead:?} ahead of the database clock"),
            Box::new(move || ticks.claim("job", db_now + ahead, minute).map(|_| ())),
        ));
    }
    for far in [
        SystemTime::UNIX_EPOCH - Duration::from_secs(1),
        SystemTime::UNIX_EPOCH + year * 9000,
    ] {
        cases.push((
            format!("tick {far:?}"),
            Box::new(move || ticks.claim("job", far, minute).map(|_| ())),
        ));
    }
    for table in bad_tables {
        cases.push((
            format!("tick table {table:?}"),
            Box::new(move || TickClaims::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("fire table {table:?}"),
            Box::new(move || FireClaims::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("lease table {table:?}"),
            Box::new(move || Leases::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("leader table {table:?}"),
            Box::new(move || Elector::new(&db()).with_table(table).map(|_| ())),
        ));
        cases.push((
            format!("units tables {table:?}"),
            Box::new(move || Units::new(&db()).with_tables("p", table).map(|_| ())),
        ));
    }
    cases.push((
        "database URL".into(),
        Box::new(|| Db::connect("postgres://[::1").map(|_| ())),
    ));
    let mut late_beats = Config::default();
    late_beats.heartbeat_interval = late_beats.ttl;
    let mut zero_ttl = Config::default();
    zero_ttl.ttl = Duration::ZERO;
    let mut no_batch = Config::default();
    no_batch.claim_batch = 0;
    // A rule between two settings is refused, not clamped.
    let mut big_batch = Config::default();
    big_batch.max_claim_per_tick = 8;
    big_batch.claim_batch = 9;
    let mut blank_host = Config::default();
    blank_host.hostname = " ".into();
    for (what, config) in [
        ("heartbeat not below the TTL", late_beats),
        ("zero TTL", zero_ttl),
        ("zero claim batch", no_batch),
        ("claim batch above the per-tick cap", big_batch),
        ("blank hostname", blank_host),
    ] {
        cases.push((
            format!("membership config: {what}"),
            Box::new(move || Leaser::new(&db(), Arc::new(Quiet), config.clone()).map(|_| ())),
        ));
    }

    let mut failures = Vec::new();
    for (name, case) in &cases {
        match case() {
            Err(e) if e.kind() == ErrorKind::InvalidInput => {}
            other => failures.push(format!("{name}: {:?}", other.map_err(|e| e.kind()))),
        }
    }
    assert!(
        failures.is_empty(),
        "not refused as invalid input:\n{}",
        failures.join("\n")
    );
    println!("{} bad inputs refused", cases.len());
    let mut c = client();
    for table in [&tick_t, &fire_t, &lease_t, &leader_t, &units_t, &procs_t] {
        assert_eq!(count(&mut c, table), 0, "{table} changed");
    }
    // Handled as documented: SQL-looking keys are data, stored verbatim; a tick far behind the clock
    // is data too (only the order of ticks matters).
    let sqlish = "'); DROP TABLE pg_class; --";
    assert!(ticks
        .claim(
            sqlish,
            SystemTime::UNIX_EPOCH + Duration::from_secs(86_400),
            minute
        )
        .unwrap()
        .is_some());
    assert!(fires.claim(sqlish).unwrap());
    assert!(leases.try_acquire(sqlish, minute).unwrap().is_some());
    let stored: String = c
        .query_one(&format!("SELECT key FROM {lease_t}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(stored, sqlish);
}
