//! A table changed under the library (a DBA's `ALTER TABLE`, a migration gone wrong, another
//! version's table in a rolling upgrade): every operation whose answer meets a column of another
//! type, or a NULL where a value is expected, returns an `ErrorKind::Database` error naming the
//! table, the column, the type found and the type expected, with the advice to run the
//! migrations: never a panic in the caller's thread, in every statement mode (direct, and
//! through PgBouncer with `PGTENURE_TEST_PGBOUNCER=1`).

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use common::{client, db, Names, Quiet, Tables};
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::schedule::{Schedule, Scheduler};
use pgtenure::{
    elector::Elector,
    fire_claims::FireClaims,
    leases::{LeaseLoss, Leases},
    tick_claims::TickClaims,
    Db, Error, ErrorKind, StatementMode,
};

/// The statement modes to try: all of them on a direct connection; through PgBouncer every mode
/// but `Protocol`, which the docs rule out behind a pooler that does not track prepared
/// statements.
fn modes() -> Vec<StatementMode> {
    let mut modes = vec![
        StatementMode::Auto,
        StatementMode::Sql,
        StatementMode::Unprepared,
    ];
    if !common::through_pgbouncer() {
        modes.push(StatementMode::Protocol);
    }
    modes
}

/// A small pool of its own in `mode`, set up as the harness's.
fn db_in(mode: StatementMode) -> Db {
    Db::builder(&common::url())
        .and_then(|b| b.max_size(2))
        .and_then(|b| b.statement_mode(mode).build())
        .map(|db| db.with_cancel_on_deadline(!common::through_pgbouncer()))
        .unwrap_or_else(|e| panic!("cannot connect in {mode}: {e}"))
}

fn alter(sql: &str) {
    client().batch_execute(sql).unwrap();
}

/// `result` is the drift error: `Database`, permanent, and its `Display` names `table`, `column`
/// and `says` (what was found and what was expected), with the advice, in the library's own
/// words; the driver's error is the source.
#[track_caller]
fn assert_drift<T: std::fmt::Debug>(
    result: pgtenure::Result<T>,
    table: &str,
    column: &str,
    says: &str,
    mode: StatementMode,
) {
    let err: Error = match result {
        Ok(value) => panic!("{mode}: expected the drift error, got Ok({value:?})"),
        Err(err) => err,
    };
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Database, "{mode}: {text}");
    assert!(err.is_permanent(), "{mode}: {text}");
    let names = format!("column \"{column}\" of table {table} {says}");
    assert!(
        text.contains(&names),
        "{mode}: wanted {names:?} in {text:?}"
    );
    assert!(text.contains("run the migrations"), "{mode}: {text}");
    assert!(
        text.contains("undo the change to the table"),
        "{mode}: {text}"
    );
    assert!(!text.contains("error deserializing"), "{mode}: {text}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "{mode}: the driver's error is the source: {err:?}"
    );
}

#[test]
fn a_lease_token_made_numeric_is_an_error_of_every_grant_and_view() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    alter(&format!(
        "ALTER TABLE {table} ALTER token TYPE numeric(20,0)"
    ));
    let found = "is numeric, pgtenure expects bigint";
    for mode in modes() {
        let db = db_in(mode);
        let leases = Leases::new(&db).with_table(&table).unwrap();
        let key = format!("raw-{mode}");
        assert_drift(
            leases.try_acquire(&key, Duration::from_secs(30)),
            &table,
            "token",
            found,
            mode,
        );
        // The grant was stored although its answer could not be read: the views say so too.
        assert_drift(leases.holder(&key), &table, "token", found, mode);
        assert_drift(leases.list("raw-"), &table, "token", found, mode);
        // A managed lease: no lease, no thread, and the family forgot the key. Its grant was
        // stored, marked as a managed tenure, and lapses unused at its TTL; until then the
        // database refuses a raw grant of it, as it refuses any raw grant of a managed tenure.
        let managed = format!("managed-{mode}");
        match leases.acquire(&managed, Duration::from_secs(30)) {
            Ok(lease) => panic!("{mode}: expected the drift error, got {lease:?}"),
            Err(e) => assert_drift::<()>(Err(e), &table, "token", found, mode),
        }
        let family = format!("{leases:?}");
        assert!(family.contains("managed_held: 0"), "{mode}: {family}");
        assert!(
            matches!(
                leases.try_acquire(&managed, Duration::from_secs(30)),
                Ok(None)
            ),
            "{mode}"
        );
        let marked: bool = client()
            .query_one(
                &format!("SELECT managed_token IS NOT NULL FROM {table} WHERE key = $1"),
                &[&managed],
            )
            .unwrap()
            .get(0);
        assert!(marked, "{mode}");
    }
}

/// Eight threads granting at once on the changed table: every one gets the error, none panics
/// (the run lost 3 to 6 of 8 threads).
#[test]
fn concurrent_grants_on_a_changed_lease_table_all_get_the_error() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    alter(&format!(
        "ALTER TABLE {table} ALTER token TYPE numeric(20,0)"
    ));
    let shared = table.clone();
    let answers = common::race(8, move |i| {
        Leases::new(&db())
            .with_table(&shared)
            .unwrap()
            .try_acquire(&format!("k{i}"), Duration::from_secs(30))
    });
    assert_eq!(answers.len(), 8);
    for answer in answers {
        let says = "is numeric, pgtenure expects bigint";
        assert_drift(answer, &table, "token", says, StatementMode::Auto);
    }
}

/// What panicked in the library's own threads (named `pgtenure-…`) since the hook was installed.
fn library_panics() -> Vec<String> {
    static PANICS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    PANICS
        .get_or_init(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let thread = std::thread::current();
                if let Some(name) = thread.name().filter(|n| n.starts_with("pgtenure-")) {
                    if let Some(panics) = PANICS.get() {
                        panics.lock().unwrap().push(format!("{name}: {info}"));
                    }
                }
                previous(info);
            }));
            Mutex::new(Vec::new())
        })
        .lock()
        .unwrap()
        .clone()
}

/// A managed lease whose renewal's answer cannot be read (its `superseded` made NULL): the renewal
/// thread logs the error and retries until the local deadline, then reports the lease expired; it
/// never panics.
#[test]
fn a_renewal_whose_answer_cannot_be_read_expires_the_lease_without_a_panic() {
    library_panics();
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let ttl = Duration::from_millis(600);
    let held: Vec<_> = modes()
        .into_iter()
        .map(|mode| {
            let leases = Leases::new(&db_in(mode)).with_table(&table).unwrap();
            let lease = leases
                .acquire(&format!("renewed-{mode}"), ttl)
                .unwrap()
                .expect("a free key");
            (mode, leases, lease)
        })
        .collect();
    alter(&format!(
        "ALTER TABLE {table} ALTER superseded DROP NOT NULL;
         UPDATE {table} SET superseded = NULL"
    ));
    for (mode, _leases, lease) in held {
        // The deadline is at most one TTL away; 5 s bounds a loaded machine.
        let loss = lease.lost().recv_timeout(Duration::from_secs(5));
        assert_eq!(loss, Ok(LeaseLoss::Expired), "{mode}");
        assert!(!lease.is_held(), "{mode}");
        lease.release().unwrap();
    }
    assert_eq!(library_panics(), Vec::<String>::new());
}

#[test]
fn a_lease_column_made_nullable_and_null_is_an_error_of_the_views() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    assert!(leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_some());
    alter(&format!(
        "ALTER TABLE {table} ALTER acquired_at DROP NOT NULL;
         UPDATE {table} SET acquired_at = NULL"
    ));
    for mode in modes() {
        let db = db_in(mode);
        let leases = Leases::new(&db).with_table(&table).unwrap();
        let says = "is NULL, pgtenure expects timestamptz (never NULL";
        assert_drift(leases.holder("k"), &table, "acquired_at", says, mode);
        assert_drift(leases.list(""), &table, "acquired_at", says, mode);
    }
}

#[test]
fn a_leader_term_made_numeric_is_an_error_of_the_poll_and_ends_a_campaign_at_startup() {
    let mut tables = Tables::new();
    let table = common::leader_table(&mut tables);
    alter(&format!("ALTER TABLE {table} ALTER term TYPE numeric"));
    let found = "is numeric, pgtenure expects bigint";
    for mode in modes() {
        let db = db_in(mode);
        let elector = Elector::new(&db)
            .with_table(&table)
            .unwrap()
            .with_name(&format!("fleet-{mode}"))
            .unwrap();
        assert_drift(elector.is_leader(), &table, "term", found, mode);
        assert_drift(elector.leader(), &table, "term", found, mode);
        // The campaign's first poll meets it: a permanent error ends the campaign at startup
        // instead of being retried in the background.
        match elector.campaign() {
            Ok(_) => panic!("{mode}: the campaign started"),
            Err(e) => assert_drift::<()>(Err(e), &table, "term", found, mode),
        }
    }
}

#[test]
fn tick_claim_columns_of_another_type_are_errors_of_claims_views_and_the_scheduler() {
    let mut tables = Tables::new();
    let Names { tick: table, .. } = tables.every_primitive();
    let ticks = TickClaims::new(&db()).with_table(&table).unwrap();
    ticks.create_table().unwrap();
    let first = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let claimed = ticks.claim("job", first, Duration::from_secs(1)).unwrap();
    claimed.expect("a free tick").release().unwrap();
    alter(&format!(
        "ALTER TABLE {table} ALTER token TYPE numeric(20,0)"
    ));
    let found = "is numeric, pgtenure expects bigint";
    for (n, mode) in modes().into_iter().enumerate() {
        let db = db_in(mode);
        let ticks = TickClaims::new(&db).with_table(&table).unwrap();
        let tick = first + Duration::from_secs(n as u64 + 1);
        assert_drift(
            ticks.claim("job", tick, Duration::from_secs(1)),
            &table,
            "token",
            found,
            mode,
        );
        assert_drift(ticks.jobs(), &table, "token", found, mode);
        // The scheduler's first read meets it: start fails rather than a timer retrying forever.
        let started = Scheduler::new(&db)
            .with_table(&table)
            .unwrap()
            .job(
                "job",
                Schedule::every(Duration::from_secs(3600)).unwrap(),
                |_| Ok(()),
            )
            .unwrap()
            .start();
        match started {
            Ok(_) => panic!("{mode}: the scheduler started"),
            Err(e) => assert_drift::<()>(Err(e), &table, "token", found, mode),
        }
    }
    alter(&format!(
        "ALTER TABLE {table} ALTER token TYPE bigint, ALTER tick TYPE text"
    ));
    for mode in modes() {
        let ticks = TickClaims::new(&db_in(mode)).with_table(&table).unwrap();
        let says = "is text, pgtenure expects timestamptz";
        assert_drift(ticks.jobs(), &table, "tick", says, mode);
    }
}

/// A fire claim's answer is computed (`won`, a count), so a changed column never reaches a read:
/// the server refuses the statement itself, and that is an error too, never a panic.
#[test]
fn a_fire_claim_column_of_another_type_is_the_servers_error() {
    let mut tables = Tables::new();
    let Names { fire: table, .. } = tables.every_primitive();
    let fires = FireClaims::new(&db()).with_table(&table).unwrap();
    fires.create_table().unwrap();
    assert!(fires.claim("before").unwrap());
    alter(&format!("ALTER TABLE {table} ALTER expires_at TYPE text"));
    for mode in modes() {
        let fires = FireClaims::new(&db_in(mode)).with_table(&table).unwrap();
        let err = fires.claim(&format!("f-{mode}")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Database, "{mode}: {err}");
        assert!(
            err.code().is_some(),
            "{mode}: the server's own refusal: {err}"
        );
        let err = fires.purge(Duration::from_secs(1)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Database, "{mode}: {err}");
    }
}

/// Membership on tables of its own: the units registered, one process's tick done.
struct Membership {
    procs: String,
    units: String,
    _tables: Tables,
}

impl Membership {
    fn new() -> Membership {
        let mut tables = Tables::new();
        let Names {
            procs: procs_t,
            units: units_t,
            ..
        } = tables.every_primitive();
        let units = Units::new(&db()).with_tables(&procs_t, &units_t).unwrap();
        units.create_tables().unwrap();
        let all: Vec<Unit> = (0..4).map(|s| Unit::new("t", s).unwrap()).collect();
        assert_eq!(units.add(&all).unwrap(), 4);
        let leaser = leaser(&db(), &procs_t, &units_t);
        leaser.heartbeat().unwrap();
        assert_eq!(leaser.tick().unwrap().claimed, 4);
        Membership {
            procs: procs_t,
            units: units_t,
            _tables: tables,
        }
    }

    fn units(&self, db: &Db) -> Units {
        Units::new(db)
            .with_tables(&self.procs, &self.units)
            .unwrap()
    }
}

fn leaser(db: &Db, procs: &str, units: &str) -> Leaser {
    Leaser::new(db, Arc::new(Quiet), common::hand_driven())
        .unwrap()
        .with_tables(procs, units)
        .unwrap()
}

#[test]
fn a_unit_token_made_numeric_is_an_error_of_the_assignments() {
    let m = Membership::new();
    alter(&format!(
        "ALTER TABLE {} ALTER token TYPE numeric(20,0)",
        m.units
    ));
    for mode in modes() {
        let units = m.units(&db_in(mode));
        let says = "is numeric, pgtenure expects bigint";
        assert_drift(units.assignments(), &m.units, "token", says, mode);
    }
}

#[test]
fn a_unit_weight_made_numeric_or_null_is_an_error_of_the_assignments() {
    let m = Membership::new();
    alter(&format!(
        "ALTER TABLE {} ALTER weight TYPE numeric",
        m.units
    ));
    for mode in modes() {
        let units = m.units(&db_in(mode));
        let says = "is numeric, pgtenure expects integer";
        assert_drift(units.assignments(), &m.units, "weight", says, mode);
    }
    alter(&format!(
        "ALTER TABLE {units} DROP CONSTRAINT IF EXISTS {units}_weight_check;
         ALTER TABLE {units} ALTER weight TYPE integer, ALTER weight DROP NOT NULL;
         UPDATE {units} SET weight = NULL WHERE shard = 2",
        units = m.units
    ));
    for mode in modes() {
        let units = m.units(&db_in(mode));
        let says = "is NULL, pgtenure expects integer (never NULL";
        assert_drift(units.assignments(), &m.units, "weight", says, mode);
    }
}

#[test]
fn process_columns_of_another_type_are_errors_of_the_view_and_of_a_tick() {
    let m = Membership::new();
    alter(&format!(
        "ALTER TABLE {} ALTER unit_count TYPE numeric",
        m.procs
    ));
    for mode in modes() {
        let units = m.units(&db_in(mode));
        let says = "is numeric, pgtenure expects integer";
        assert_drift(units.processes(), &m.procs, "unit_count", says, mode);
    }
    alter(&format!(
        "ALTER TABLE {} ALTER unit_count TYPE integer, ALTER weight TYPE numeric",
        m.procs
    ));
    for mode in modes() {
        let db = db_in(mode);
        let leaser = leaser(&db, &m.procs, &m.units);
        leaser.heartbeat().unwrap();
        // The tick's statistics read every live process's weight.
        let says = "is numeric[], pgtenure expects bigint[]";
        assert_drift(leaser.tick(), &m.procs, "others_weights", says, mode);
        let says = "is numeric, pgtenure expects bigint";
        assert_drift(m.units(&db).processes(), &m.procs, "weight", says, mode);
        leaser.delete_process().unwrap();
    }
}

/// A processes table made before the `settled` column (an older pgtenure's, not migrated: no
/// version record, the columns of version 2): every heartbeat and tick is a schema error naming
/// the table, the versions and the migration, permanent, in every statement mode; a `run` loop
/// ends at startup with it, and nothing panics. The same column dropped from a table recorded at
/// this version (a DBA's change) is the same schema error, saying what the record says (and
/// `migrate` adds the column again: `tests/migrations.rs`).
#[test]
fn a_processes_table_without_settled_is_an_error_naming_the_column_and_ends_the_loop() {
    library_panics();
    let m = Membership::new();
    alter(&format!(
        "ALTER TABLE {procs} DROP COLUMN settled; COMMENT ON TABLE {procs} IS NULL",
        procs = m.procs
    ));
    for mode in modes() {
        let db = db_in(mode);
        let leaser = leaser(&db, &m.procs, &m.units);
        for (what, result) in [
            ("heartbeat", leaser.heartbeat().map(|_| ())),
            ("tick", leaser.tick().map(|_| ())),
        ] {
            let err = result.expect_err(what);
            let text = err.to_string();
            assert_eq!(err.kind(), ErrorKind::Schema, "{mode} {what}: {text}");
            assert!(err.is_permanent(), "{mode} {what}: {text}");
            assert!(text.contains(&m.procs), "{mode} {what}: {text}");
            assert!(text.contains("schema version 2"), "{mode} {what}: {text}");
            assert!(text.contains("pgtenure migrate"), "{mode} {what}: {text}");
        }
        let (_stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
        let ended = leaser.run(&shutdown).expect_err("run ends with the error");
        assert_eq!(ended.kind(), ErrorKind::Schema, "{mode}: {ended}");
    }
    alter(&format!(
        "COMMENT ON TABLE {} IS 'pgtenure: processes table, schema version 3'",
        m.procs
    ));
    for mode in modes() {
        let db = db_in(mode);
        let leaser = leaser(&db, &m.procs, &m.units);
        let err = leaser.heartbeat().expect_err("heartbeat");
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Schema, "{mode}: {text}");
        assert!(err.is_permanent(), "{mode}: {text}");
        assert!(
            text.contains("schema version 2 (its record says 3"),
            "{mode}: {text}"
        );
        assert!(text.contains("run the migrations"), "{mode}: {text}");
        let (_stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
        let ended = leaser.run(&shutdown).expect_err("run ends with the error");
        assert_eq!(ended.kind(), ErrorKind::Schema, "{mode}: {ended}");
    }
    // Made NULL in one live row (a DBA's change): the other processes' ticks are errors, never a
    // panic of the loop's thread, and the loop goes on (stop still returns).
    alter(&format!(
        "ALTER TABLE {procs} ADD COLUMN settled boolean NOT NULL DEFAULT true;
         ALTER TABLE {procs} ALTER settled DROP NOT NULL",
        procs = m.procs
    ));
    let db = db_in(StatementMode::Auto);
    let other = leaser(&db, &m.procs, &m.units);
    other.heartbeat().unwrap();
    alter(&format!(
        "UPDATE {} SET settled = NULL WHERE process_id = '{}'",
        m.procs,
        other.process_id()
    ));
    let running = leaser(&db, &m.procs, &m.units).spawn().unwrap();
    let says = "is NULL";
    let err = leaser(&db, &m.procs, &m.units).tick().map(|_| ());
    let text = err
        .expect_err("a tick reads every live process's settled")
        .to_string();
    assert!(
        text.contains(says) || text.contains("others_settled"),
        "{text}"
    );
    running.stop().unwrap();
    assert_eq!(library_panics(), Vec::<String>::new());
}

/// Every background thread at once, then every table changed under them while they run (a DBA's
/// `ALTER TABLE` mid-flight, after each started cleanly): a lease's renewal thread, a campaign, a
/// membership loop and a started scheduler meet errors, never a panic, and each stops within its
/// bound.
#[test]
fn tables_changed_under_running_threads_never_panic_them_and_every_owner_stops() {
    library_panics();
    // The harness's logger, so the loops' errors show with --nocapture.
    let _ = db();
    let mut tables = Tables::new();
    let Names {
        tick: tick_t,
        lease: lease_t,
        leader: leader_t,
        procs: procs_t,
        units: units_t,
        ..
    } = tables.every_primitive();
    for mode in modes() {
        let db = db_in(mode);
        let leases = Leases::new(&db).with_table(&lease_t).unwrap();
        leases.create_table().unwrap();
        let lease = leases
            .acquire(&format!("k-{mode}"), Duration::from_millis(900))
            .unwrap()
            .expect("a free key");
        let elector = Elector::new(&db)
            .with_table(&leader_t)
            .unwrap()
            .with_name(&format!("fleet-{mode}"))
            .unwrap()
            .with_ttl(Duration::from_millis(900))
            .unwrap();
        elector.create_table().unwrap();
        let leadership = elector.campaign().unwrap();
        let units = Units::new(&db).with_tables(&procs_t, &units_t).unwrap();
        units.create_tables().unwrap();
        units.add(&[Unit::new("t", 1).unwrap()]).unwrap();
        let mut config = common::hand_driven();
        config.ttl = Duration::from_millis(900);
        config.heartbeat_interval = Duration::from_millis(300);
        config.rebalance_interval = Duration::from_millis(100);
        let running = Leaser::new(&db, Arc::new(Quiet), config)
            .unwrap()
            .with_tables(&procs_t, &units_t)
            .unwrap()
            .spawn()
            .unwrap();
        TickClaims::new(&db)
            .with_table(&tick_t)
            .unwrap()
            .create_table()
            .unwrap();
        let scheduler = Scheduler::new(&db)
            .with_table(&tick_t)
            .unwrap()
            .job(
                "job",
                Schedule::every(Duration::from_millis(100)).unwrap(),
                |_| Ok(()),
            )
            .unwrap()
            .start()
            .unwrap();
        // Every thread has done its first round.
        common::wait_for("the threads to start", Duration::from_secs(10), || {
            (leadership.is_leading() && running.leaser().owned().len() == 1).then_some(())
        });
        alter(&format!(
            "ALTER TABLE {lease_t} ALTER token TYPE numeric(20,0);
             ALTER TABLE {leader_t} ALTER term TYPE numeric;
             ALTER TABLE {procs_t} ALTER weight TYPE numeric;
             ALTER TABLE {procs_t} RENAME COLUMN changes TO changes_x;
             ALTER TABLE {units_t} ALTER token TYPE numeric(20,0);
             ALTER TABLE {tick_t} ALTER token TYPE numeric(20,0)"
        ));
        // Real time is the subject: the loops run into the change for a while (each polls at
        // least every 300 ms).
        std::thread::sleep(Duration::from_millis(1500));
        let stopped = std::time::Instant::now();
        let _ = lease.release();
        let _ = leadership.stop();
        let _ = running.stop();
        let _ = scheduler.stop();
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "{mode}: stopping took {:?}",
            stopped.elapsed()
        );
        assert_eq!(library_panics(), Vec::<String>::new(), "{mode}");
        // Back as the library makes them, for the next mode.
        alter(&format!(
            "ALTER TABLE {lease_t} ALTER token TYPE bigint;
             ALTER TABLE {leader_t} ALTER term TYPE bigint;
             ALTER TABLE {procs_t} ALTER weight TYPE bigint;
             ALTER TABLE {procs_t} RENAME COLUMN changes_x TO changes;
             ALTER TABLE {units_t} ALTER token TYPE bigint;
             ALTER TABLE {tick_t} ALTER token TYPE bigint"
        ));
    }
}

/// A unit's token made numeric: the tick's statistics digest the tokens with a function that has
/// no numeric form, so the server refuses the statement itself (42883); the error still says what
/// to do (run the migrations), in every mode, and is permanent.
#[test]
fn a_unit_token_made_numeric_is_an_error_of_a_tick_that_says_to_run_the_migrations() {
    let m = Membership::new();
    alter(&format!(
        "ALTER TABLE {} ALTER token TYPE numeric(20,0)",
        m.units
    ));
    for mode in modes() {
        let db = db_in(mode);
        let leaser = leaser(&db, &m.procs, &m.units);
        leaser.heartbeat().unwrap();
        let err = leaser
            .tick()
            .map(|_| ())
            .expect_err("the tick's statistics");
        let text = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Database, "{mode}: {text}");
        assert!(err.is_permanent(), "{mode}: {text}");
        assert!(text.contains("(42883)"), "{mode}: {text}");
        assert!(text.contains("run the migrations"), "{mode}: {text}");
        leaser.delete_process().unwrap();
    }
}

#[test]
fn a_promotion_record_without_its_row_is_an_error_naming_the_record_table() {
    // A DBA emptied the record beside a lease table: every grant says which table lacks its row
    // and how to make it again, not a placeholder.
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    alter(&format!("DELETE FROM {table}_promotion"));
    let db = db_in(StatementMode::Auto);
    let leases = Leases::new(&db).with_table(&table).unwrap();
    let err = leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Database, "{text}");
    assert!(
        text.contains(&format!(
            "the promotion record \"{table}_promotion\" has no row"
        )),
        "{text}"
    );
    assert!(text.contains("pgtenure::migrate()"), "{text}");
    // What it says to do works.
    alter(&format!("DROP TABLE {table}_promotion"));
    leases.create_table().unwrap();
    assert!(leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_some());
}
