//! The SQL-level names of pgtenure's statements are content-addressed (`pgt_` and a hash of the
//! parameter types and the text): a rolling upgrade behind a pooler relies on two versions naming
//! one statement alike. A change of a statement's text or parameter types changes its name, which
//! must be deliberate: this test lists every name a fleet of every primitive prepares, on tables of
//! fixed names, and compares the list with `tests/fixtures/statement_names.txt`.
//!
//! Set `PGTENURE_WRITE_NAMES=1` to write the list instead (after a deliberate change of a statement).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{client, Quiet};
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::semaphores::Semaphore;
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, DbBuilder,
    StatementMode,
};

/// Fixed table names (the text, and so the names, depend on them).
const TABLES: [&str; 7] = [
    "t_names_tick",
    "t_names_fire",
    "t_names_lease",
    "t_names_leader",
    "t_names_procs",
    "t_names_units",
    "t_names_sema",
];

fn drop_tables() {
    let mut c = client();
    for name in TABLES {
        let _ = c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}, {name}_promotion CASCADE;
             DROP SEQUENCE IF EXISTS {name}_token_seq, {name}_term_seq"
        ));
    }
}

struct DropTables;

impl Drop for DropTables {
    fn drop(&mut self) {
        drop_tables();
    }
}

#[test]
fn every_statement_keeps_its_sql_level_name() {
    drop_tables();
    let _cleanup = DropTables;
    let db = DbBuilder::from_config(common::direct_url().parse().unwrap())
        .max_size(1)
        .unwrap()
        .statement_mode(StatementMode::Sql)
        .build()
        .unwrap();
    let [tick_t, fire_t, lease_t, leader_t, procs_t, units_t, sema_t] = TABLES;
    let ticks = TickClaims::new(&db).with_table(tick_t).unwrap();
    let fires = FireClaims::new(&db).with_table(fire_t).unwrap();
    let leases = Leases::new(&db).with_table(lease_t).unwrap();
    let elector = Elector::new(&db).with_table(leader_t).unwrap();
    let semaphore = Semaphore::new(&db).with_table(sema_t).unwrap();
    let units = Units::new(&db).with_tables(procs_t, units_t).unwrap();
    let leaser = Leaser::new(&db, Arc::new(Quiet), common::hand_driven())
        .unwrap()
        .with_tables(procs_t, units_t)
        .unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    leases.create_table().unwrap();
    elector.create_table().unwrap();
    semaphore.create_table().unwrap();
    units.create_tables().unwrap();

    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let won = ticks
        .claim("job", tick, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    won.extend(Duration::from_secs(30)).unwrap();
    won.release().unwrap();
    ticks.jobs().unwrap();
    assert!(fires.claim("f").unwrap());
    fires.purge(Duration::from_secs(3600)).unwrap();
    assert!(leases
        .try_acquire("k", Duration::from_secs(60))
        .unwrap()
        .is_some());
    leases.renew(&["k"], Duration::from_secs(60)).unwrap();
    leases.supersede("k").unwrap();
    leases.holder("k").unwrap();
    leases.list("").unwrap();
    leases.summary(3).unwrap();
    leases.refusal("k").unwrap();
    leases.release("k").unwrap();
    leases.force_release("k").unwrap();
    let lease = leases
        .acquire("m", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    lease.release().unwrap();
    let permit = semaphore
        .acquire("s", 2, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    semaphore.holders("s").unwrap();
    semaphore.list("").unwrap();
    semaphore.summary(3).unwrap();
    permit.release().unwrap();
    assert!(elector.is_leader().unwrap());
    elector.leader().unwrap();
    elector.leaders().unwrap();
    elector.request_resign().unwrap();
    elector.resign().unwrap();
    units.add(&[Unit::new("t", 1).unwrap()]).unwrap();
    units.set_weight(&Unit::new("t", 1).unwrap(), 2).unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    units.assignments().unwrap();
    units.processes().unwrap();
    units.unowned().unwrap();
    leaser.sweep().unwrap();
    leaser.release().unwrap();
    leaser.delete_process().unwrap();
    units.remove(&[Unit::new("t", 1).unwrap()]).unwrap();

    let mut conn = db.connection().unwrap();
    let names: Vec<String> = conn
        .query_typed(
            "SELECT name || ' ' || split_part(statement, E'\\n', 1)
               FROM pg_prepared_statements WHERE from_sql ORDER BY name",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let listed = names.join("\n") + "\n";
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/statement_names.txt"
    );
    if std::env::var_os("PGTENURE_WRITE_NAMES").is_some() {
        std::fs::write(path, &listed).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap();
    assert_eq!(listed, expected, "a statement's SQL-level name changed");
}
