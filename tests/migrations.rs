//! Schema versions (`docs/upgrading.md`): `migrate` creates tables at this build's version and
//! brings older ones there step by step, from every instance at once; it refuses a table migrated
//! by a newer pgtenure and changes nothing; a handle on a table older than it needs fails its first
//! call with `ErrorKind::Schema` (table, version found, version needed), never a 42703 deep in a
//! loop; and a fleet of the previous release and this one keeps every guarantee on the migrated
//! tables (the rolling upgrade, also under the checker).
#![allow(dead_code)]

mod common;
#[path = "common/rolling.rs"]
mod rolling;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{client, db, Names, Quiet, Tables};
use pgtenure::elector::Elector;
use pgtenure::fire_claims::FireClaims;
use pgtenure::leases::Leases;
use pgtenure::membership::{Config, Leaser, Unit, Units};
use pgtenure::migrations::{self, Plan};
use pgtenure::tick_claims::TickClaims;
use pgtenure::ErrorKind;

const V1: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema_v1");

/// Makes `table` as the oldest pgtenure did (`tests/fixtures/schema_v1/<kind>.sql`).
fn make_v1(kind: &str, table: &str) {
    let text = std::fs::read_to_string(format!("{V1}/{kind}.sql")).unwrap();
    client().batch_execute(&render(&text, table)).unwrap();
}

/// `text` with `{table}` and `{table:suffix}` naming `table`.
fn render(text: &str, table: &str) -> String {
    let (mut out, mut rest) = (String::new(), text);
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let end = i + rest[i..].find('}').unwrap();
        match rest[i + 1..end].split_once(':') {
            Some((_, suffix)) => out.push_str(&format!("\"{table}_{suffix}\"")),
            None => out.push_str(&format!("\"{table}\"")),
        }
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

fn tables_for(n: &Names) -> migrations::Tables {
    migrations::Tables::default()
        .with_tick_claims(&n.tick)
        .and_then(|t| t.with_fire_claims(&n.fire))
        .and_then(|t| t.with_leases(&n.lease))
        .and_then(|t| t.with_leader(&n.leader))
        .and_then(|t| t.with_membership(&n.procs, &n.units))
        .and_then(|t| t.with_semaphores(&n.sema))
        .unwrap()
}

fn make_all_v1(n: &Names) {
    make_v1("tick_claims", &n.tick);
    make_v1("fire_claims", &n.fire);
    make_v1("leases", &n.lease);
    make_v1("leader", &n.leader);
    make_v1("processes", &n.procs);
    make_v1("units", &n.units);
    make_v1("semaphores", &n.sema);
}

fn comment(table: &str) -> Option<String> {
    client()
        .query_one(
            "SELECT obj_description(to_regclass($1), 'pg_class')",
            &[&table],
        )
        .unwrap()
        .get(0)
}

fn versions(plans: &[Plan]) -> Vec<(String, Option<u32>, u32)> {
    plans
        .iter()
        .map(|p| (p.kind().to_owned(), p.version(), p.target()))
        .collect()
}

#[test]
fn a_fresh_database_is_created_at_this_version_and_recorded() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    let plans = migrations::plan(&db, &tables_for(&n)).unwrap();
    assert!(plans.iter().all(|p| !p.exists() && !p.is_current()));
    let done = migrations::migrate(&db, &tables_for(&n)).unwrap();
    assert_eq!(
        versions(&done),
        versions(&plans),
        "migrate ran what plan said"
    );
    let plans = migrations::plan(&db, &tables_for(&n)).unwrap();
    for plan in &plans {
        assert!(plan.is_current(), "{plan}");
        assert_eq!(plan.recorded_version(), Some(plan.target()), "{plan}");
    }
    assert_eq!(
        comment(&n.lease)
            .as_deref()
            .map(|c| c.starts_with("pgtenure: leases table, schema version 3")),
        Some(true)
    );
    // The semaphores table is among the defaults: migrate made it, and a semaphore on it works.
    assert_eq!(
        comment(&n.sema)
            .as_deref()
            .map(|c| c.starts_with("pgtenure: semaphores table, schema version 1")),
        Some(true),
        "{:?}",
        comment(&n.sema)
    );
    let permits = pgtenure::semaphores::Semaphore::new(&db)
        .with_table(&n.sema)
        .unwrap();
    let permit = permits.acquire("k", 2, Duration::from_secs(5)).unwrap();
    assert_eq!(permit.as_ref().map(|p| p.slot()), Some(0));
}

/// The case the CHANGELOG's hand-written `ALTER TABLE` used to cover: a processes table made
/// before `settled`, under a new Leaser: its first heartbeat and its run loop fail with the
/// schema error, and both work once migrated.
#[test]
fn a_handle_on_an_older_table_fails_its_first_call_naming_the_versions() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    make_all_v1(&n);
    let db = db();
    let check = |what: &str, err: pgtenure::Error, table: &str, found: u32, needed: u32| {
        assert_eq!(err.kind(), ErrorKind::Schema, "{what}: {err}");
        assert!(err.is_permanent(), "{what}");
        let text = err.to_string();
        for needle in [
            table.to_owned(),
            format!("schema version {found}"),
            format!("needs ({needed})"),
            "pgtenure migrate".to_owned(),
        ] {
            assert!(text.contains(&needle), "{what}: {needle:?} not in {text}");
        }
    };
    let ticks = TickClaims::new(&db).with_table(&n.tick).unwrap();
    let err = ticks
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap_err();
    check("claim tick", err, &n.tick, 1, 2);
    let fires = FireClaims::new(&db).with_table(&n.fire).unwrap();
    check("claim fire", fires.claim("f").unwrap_err(), &n.fire, 1, 2);
    let leases = Leases::new(&db).with_table(&n.lease).unwrap();
    let err = leases.try_acquire("k", Duration::from_secs(5)).unwrap_err();
    check("acquire lease", err, &n.lease, 1, 3);
    let elector = Elector::new(&db).with_table(&n.leader).unwrap();
    check(
        "is_leader",
        elector.is_leader().unwrap_err(),
        &n.leader,
        1,
        3,
    );
    let leaser = Leaser::new(&db, Arc::new(Quiet), Config::default())
        .unwrap()
        .with_tables(&n.procs, &n.units)
        .unwrap();
    check("heartbeat", leaser.heartbeat().unwrap_err(), &n.procs, 1, 3);
    // The run loop reports it as permanent at once instead of retrying.
    let (_stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let started = std::time::Instant::now();
    check("run", leaser.run(&shutdown).unwrap_err(), &n.procs, 1, 3);
    assert!(started.elapsed() < Duration::from_secs(5));
    // Nothing was written by any of them.
    assert_eq!(common::count(&mut client(), &n.lease), 0);
    assert_eq!(common::count(&mut client(), &n.procs), 0);

    // Migrated: the same handles work (the failed check was not cached).
    let before = migrations::plan(&db, &tables_for(&n)).unwrap();
    assert!(before
        .iter()
        .all(|p| p.recorded_version().is_none() && p.version() == Some(1)));
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    assert!(ticks
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap()
        .is_some());
    assert!(fires.claim("f").unwrap());
    assert!(leases
        .try_acquire("k", Duration::from_secs(5))
        .unwrap()
        .is_some());
    assert!(elector.is_leader().unwrap());
    leaser.heartbeat().unwrap();
    for plan in migrations::plan(&db, &tables_for(&n)).unwrap() {
        assert!(plan.is_current(), "{plan}");
    }
}

/// The oldest layout of every table, and every layout in between, migrated to this build's by
/// every instance at once; the rows already there stay.
#[test]
fn many_instances_migrate_old_and_fresh_tables_at_once() {
    let mut tables = Tables::new();
    let old = tables.every_primitive();
    let fresh = tables.every_primitive();
    make_all_v1(&old);
    client()
        .batch_execute(&format!(
            "INSERT INTO \"{t}\" (job_id, tick, owner, token) VALUES ('kept', now(), 'o', 7);
             INSERT INTO \"{u}\" (tenant, shard) VALUES ('kept', 1)",
            t = old.tick,
            u = old.units
        ))
        .unwrap();
    let (old_t, fresh_t) = (tables_for(&old), tables_for(&fresh));
    let results = common::race(8, move |i| {
        let db = common::fresh_db();
        let t = if i % 2 == 0 { &old_t } else { &fresh_t };
        migrations::migrate(&db, t).map(|plans| plans.len())
    });
    for r in results {
        assert_eq!(r.unwrap(), 7);
    }
    let db = db();
    for plan in migrations::plan(&db, &tables_for(&old))
        .unwrap()
        .into_iter()
        .chain(migrations::plan(&db, &tables_for(&fresh)).unwrap())
    {
        assert!(plan.is_current(), "{plan}");
        assert_eq!(plan.recorded_version(), Some(plan.target()));
    }
    let ticks = TickClaims::new(&db).with_table(&old.tick).unwrap();
    let jobs = ticks.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].token, 7);
    let units = Units::new(&db).with_tables(&old.procs, &old.units).unwrap();
    assert_eq!(units.assignments().unwrap().len(), 1);
    // The owner index was rebuilt with slot; the token sequence belongs to the token column.
    let row = client()
        .query_one(
            "SELECT pg_get_indexdef(to_regclass($1)),
                    (SELECT count(*) FROM pg_depend d
                      WHERE d.objid = to_regclass($2) AND d.refobjid = to_regclass($3)
                        AND d.deptype = 'a')",
            &[
                &format!("{}_owner", old.units),
                &format!("{}_token_seq", old.units),
                &old.units,
            ],
        )
        .unwrap();
    let index: String = row.get(0);
    assert!(index.contains("(process_id, slot)"), "{index}");
    assert_eq!(
        row.get::<_, i64>(1),
        1,
        "the sequence is owned by the token column"
    );
}

#[test]
fn a_table_migrated_by_a_newer_pgtenure_is_refused_unchanged_and_still_used() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    Leases::new(&db)
        .with_table(&n.lease)
        .unwrap()
        .create_table()
        .unwrap();
    let newer = "pgtenure: leases table, schema version 9 (written by pgtenure migrate)";
    client()
        .batch_execute(&format!("COMMENT ON TABLE \"{}\" IS '{newer}'", n.lease))
        .unwrap();
    let err = migrations::migrate(&db, &tables_for(&n)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    let text = err.to_string();
    for needle in [
        n.lease.as_str(),
        "schema version 9",
        "(3)",
        "upgrade pgtenure",
        "nothing was changed",
    ] {
        assert!(text.contains(needle), "{needle:?} not in {text}");
    }
    // Nothing changed: no other table was created, the record is the newer one.
    assert!(!common::table_exists(&mut client(), &n.tick));
    assert_eq!(comment(&n.lease).as_deref(), Some(newer));
    let err = Leases::new(&db)
        .with_table(&n.lease)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    // This build's handles keep working against it (a rolling upgrade: N against N+1).
    let leases = Leases::new(&db).with_table(&n.lease).unwrap();
    let lease = leases
        .acquire("k", Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert!(lease.token() > 0);
    lease.release().unwrap();
    // A newer release that contracted the table (dropped what this build reads) says so in the
    // record: this build's handles refuse it at their first call.
    client()
        .batch_execute(&format!(
            "COMMENT ON TABLE \"{}\" IS 'pgtenure: leases table, schema version 10, usable by \
             builds of version 4 and later'",
            n.lease
        ))
        .unwrap();
    let leases = Leases::new(&common::fresh_db())
        .with_table(&n.lease)
        .unwrap();
    let err = leases.try_acquire("k", Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    assert!(err.to_string().contains("upgrade pgtenure"), "{err}");
}

#[test]
fn a_table_without_a_record_is_taken_at_the_version_its_columns_show() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    // As pgtenure made it before versions were recorded (or a DBA from the DDL, without the
    // COMMENT): every column there, no record.
    client()
        .batch_execute(&format!("COMMENT ON TABLE \"{}\" IS NULL", n.procs))
        .unwrap();
    let fresh = common::fresh_db();
    let leaser = Leaser::new(&fresh, Arc::new(Quiet), Config::default())
        .unwrap()
        .with_tables(&n.procs, &n.units)
        .unwrap();
    leaser.heartbeat().unwrap();
    let plan = migrations::plan(&fresh, &tables_for(&n)).unwrap();
    let procs = plan.iter().find(|p| p.kind() == "processes").unwrap();
    assert_eq!((procs.recorded_version(), procs.version()), (None, Some(3)));
    assert!(procs.to_string().contains("no version record"), "{procs}");
    // A record-less table without `settled` is version 2, too old.
    client()
        .batch_execute(&format!("ALTER TABLE \"{}\" DROP COLUMN settled", n.procs))
        .unwrap();
    let other = common::fresh_db();
    let leaser = Leaser::new(&other, Arc::new(Quiet), Config::default())
        .unwrap()
        .with_tables(&n.procs, &n.units)
        .unwrap();
    let err = leaser.heartbeat().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    assert!(err.to_string().contains("no version record"), "{err}");
    // Migrating a record-less table runs every step (each changing nothing already there).
    migrations::migrate(&other, &tables_for(&n)).unwrap();
    leaser.heartbeat().unwrap();
    assert!(comment(&n.procs).unwrap().contains("schema version 3"));
}

/// The previous release's lease statements (`tests/fixtures/leases_before_managed/`), which never
/// name `managed_token`.
fn previous_release(statement: &str, table: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/leases_before_managed/{statement}.sql",
        env!("CARGO_MANIFEST_DIR")
    );
    render(&std::fs::read_to_string(path).unwrap(), table)
}

/// The previous release's acquire (`keep`: a raw grant): its token when granted.
fn previous_acquire(table: &str, key: &str, owner: &str, keep: bool) -> Option<i64> {
    let none: Option<SystemTime> = None;
    client()
        .query(
            &previous_release("acquire", table),
            &[
                &key,
                &owner,
                &30_000_000i64,
                &keep,
                &false,
                &false,
                &1i64,
                &none,
                &none,
            ],
        )
        .unwrap()
        .first()
        .map(|row| row.get("token"))
}

/// Leases schema version 3 (`managed_token`): a handle of this build refuses a version 2 table at
/// its first call, naming both versions and the migration, and writes nothing; after `migrate`, the
/// previous release's statements keep working beside this build's. What holds during the rollout:
/// a tenure either build grants is exclusive as before; only a managed lease of the previous
/// release is unmarked, so a raw re-acquire by the same owner name can adopt it, as it could before
/// (and the previous release's raw re-acquire can adopt a marked one: it does not read the mark).
/// A tenure the previous release grants on a row a managed lease held is never left marked.
#[test]
fn leases_version_3_is_needed_migrated_and_the_previous_release_keeps_working_beside_it() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    // The table as the previous release made it: version 2, without managed_token.
    client()
        .batch_execute(&format!(
            "ALTER TABLE \"{table}\" DROP COLUMN managed_token;
             COMMENT ON TABLE \"{table}\" IS 'pgtenure: leases table, schema version 2, usable by \
             builds of version 1 and later'"
        ))
        .unwrap();
    let old_managed = previous_acquire(&table, "old-managed", "shared", false).unwrap();
    let leases = Leases::new(&common::fresh_db())
        .with_table(&table)
        .unwrap()
        .with_owner("shared")
        .unwrap();
    for err in [
        leases.try_acquire("k", Duration::from_secs(5)).unwrap_err(),
        leases
            .acquire("k", Duration::from_secs(5))
            .map(|lease| lease.map(|l| l.token()))
            .unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
        let text = err.to_string();
        for needle in [
            table.as_str(),
            "schema version 2",
            "needs (3)",
            "pgtenure migrate",
        ] {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
    }
    assert_eq!(common::count(&mut client(), &table), 1, "nothing written");

    leases.create_table().unwrap();
    assert!(comment(&table)
        .unwrap()
        .starts_with("pgtenure: leases table, schema version 3"));
    assert!(leases.holder("k").unwrap().is_none());
    // The previous release's statements work on the migrated table.
    let old_raw = previous_acquire(&table, "old-raw", "old-owner", true).unwrap();
    assert_eq!(
        previous_acquire(&table, "old-raw", "old-owner", true),
        Some(old_raw)
    );
    let renewed = client()
        .query(
            &previous_release("renew", &table),
            &[&vec!["old-raw"], &"old-owner", &30_000_000i64],
        )
        .unwrap();
    assert_eq!(renewed.len(), 1);
    assert!(!leases.holder("old-raw").unwrap().unwrap().managed);

    // This build's managed lease is marked, and exclusive against this build's raw calls of the
    // same owner name; the previous release's raw re-acquire does not read the mark.
    let lease = leases
        .acquire("new-managed", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert!(leases.holder("new-managed").unwrap().unwrap().managed);
    let twin = Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("shared")
        .unwrap();
    assert!(twin
        .try_acquire("new-managed", Duration::from_secs(30))
        .unwrap()
        .is_none());
    assert_eq!(
        previous_acquire(&table, "new-managed", "shared", true),
        Some(lease.token()),
        "the previous release adopts by owner name, as it always did"
    );
    lease.release().unwrap();
    // The previous release's managed lease is not marked: this build's raw re-acquire by the same
    // owner name keeps its token, as before (docs/upgrading.md).
    let info = leases.holder("old-managed").unwrap().unwrap();
    assert_eq!(
        (info.token, info.live, info.managed),
        (old_managed, true, false)
    );
    assert_eq!(
        twin.try_acquire("old-managed", Duration::from_secs(30))
            .unwrap()
            .map(|g| g.token()),
        Some(old_managed)
    );

    // A row this build's managed lease held, lapsed, then granted by the previous release: a new
    // token, so no stale mark; this build's raw calls of that owner name renew it.
    let lease = leases
        .acquire("handed", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    let managed = lease.token();
    lease.release().unwrap();
    let raw = previous_acquire(&table, "handed", "shared", true).unwrap();
    assert!(raw > managed);
    let info = leases.holder("handed").unwrap().unwrap();
    assert_eq!((info.token, info.live, info.managed), (raw, true, false));
    assert_eq!(
        twin.renew(&["handed"], Duration::from_secs(30))
            .unwrap()
            .get("handed"),
        Some(pgtenure::leases::KeyRenewal::Held { token: raw })
    );
}

#[test]
fn a_table_recorded_as_another_kind_is_refused() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    Leases::new(&db)
        .with_table(&n.lease)
        .unwrap()
        .create_table()
        .unwrap();
    let ticks = TickClaims::new(&db).with_table(&n.lease).unwrap();
    let err = ticks.jobs().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    assert!(err.to_string().contains("leases table"), "{err}");
    assert_eq!(ticks.create_table().unwrap_err().kind(), ErrorKind::Schema);
}

/// The rolling upgrade in short (the checker runs it longer, under load): two processes of the
/// previous release and two of this one share 150 units on the migrated tables, and the old ones
/// are replaced by new ones one by one.
#[test]
fn the_previous_release_and_this_one_share_units_on_the_migrated_tables() {
    let figures = rolling::rolling_upgrade(150, 2, 2, Duration::from_secs(6), true);
    println!("rolling upgrade: {figures:?}");
    assert_eq!(figures.violations, 0);
    assert!(figures.old_claimed > 0);
}

#[test]
fn membership_units_are_added_after_migrating() {
    // A plain check that the migrated units table takes this build's writes.
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    make_v1("processes", &n.procs);
    make_v1("units", &n.units);
    let db = db();
    let units = Units::new(&db).with_tables(&n.procs, &n.units).unwrap();
    let err = units.add(&[Unit::new("t", 1).unwrap()]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema);
    units.create_tables().unwrap();
    assert_eq!(units.add(&[Unit::new("t", 1).unwrap()]).unwrap(), 1);
}

/// The loops that start threads report an older table at once, as a permanent error, before any
/// thread runs: the scheduler's start, the elector's campaign, the membership loop (above).
#[test]
fn loops_report_an_older_table_at_start() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    make_v1("tick_claims", &n.tick);
    make_v1("leader", &n.leader);
    let db = db();
    let every = pgtenure::schedule::Schedule::every(Duration::from_secs(1)).unwrap();
    let err = pgtenure::schedule::Scheduler::new(&db)
        .with_table(&n.tick)
        .unwrap()
        .job("job", every, |_| Ok(()))
        .unwrap()
        .start()
        .map(drop)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    assert!(err.to_string().contains(&n.tick), "{err}");
    let err = Elector::new(&db)
        .with_table(&n.leader)
        .unwrap()
        .campaign()
        .map(drop)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    assert!(err.to_string().contains("needs (3)"), "{err}");
}

/// A table with every column but no version record (made before versions were recorded, by
/// another role): a role that may use it but not alter it still migrates (there is nothing to do
/// but the record, which its owner's migrate writes), and its handles work.
#[test]
fn a_role_that_does_not_own_a_current_table_without_a_record_still_migrates() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let role = common::Role::new(&mut tables, "read committed");
    let db = db();
    let ticks = TickClaims::new(&db).with_table(&n.tick).unwrap();
    ticks.create_table().unwrap();
    client()
        .batch_execute(&format!(
            "COMMENT ON TABLE \"{0}\" IS NULL; GRANT ALL ON \"{0}\" TO {1}",
            n.tick, role.name
        ))
        .unwrap();
    let limited = pgtenure::DbBuilder::from_config(role.config("limited"))
        .build()
        .unwrap();
    let theirs = TickClaims::new(&limited).with_table(&n.tick).unwrap();
    theirs.create_table().unwrap();
    assert!(theirs
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap()
        .is_some());
    assert_eq!(comment(&n.tick), None, "the record is the owner's to write");
    // A table that lacks a step is another matter: the role cannot migrate it, and says so.
    client()
        .batch_execute(&format!("ALTER TABLE \"{}\" DROP COLUMN claim_id", n.tick))
        .unwrap();
    let err = TickClaims::new(&limited)
        .with_table(&n.tick)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(&pgtenure::postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{err}"
    );
    ticks.create_table().unwrap();
    assert!(comment(&n.tick).unwrap().contains("schema version 2"));
}

/// A long transaction on a table (here a tick claim's fence held by a slow writer) while six
/// instances' startups migrate that table: its `ALTER TABLE` waits for the ACCESS EXCLUSIVE lock,
/// and every later statement on the table queues behind the waiting ALTER. Each attempt waits at
/// most 100 ms for the lock, so the previous release's statements on the table (here its claim)
/// keep running within a bound far below any TTL, and the migration succeeds once the
/// transaction ends.
#[test]
fn a_migration_behind_a_long_transaction_does_not_stall_the_running_fleet() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    make_v1("tick_claims", &n.tick);
    let claim = format!(
        "UPDATE \"{}\" SET busy_until = now() + interval '1 second' WHERE job_id = 'k'",
        n.tick
    );
    client()
        .batch_execute(&format!(
            "INSERT INTO \"{t}\" (job_id, tick, owner, token) VALUES ('j', now(), 'o', 1);
             INSERT INTO \"{t}\" (job_id, tick, owner, token) VALUES ('k', now(), 'o', 1)",
            t = n.tick
        ))
        .unwrap();
    let mut writer = client();
    let mut fenced = writer.transaction().unwrap();
    fenced
        .query(
            &format!("SELECT 1 FROM \"{}\" WHERE job_id = 'j' FOR SHARE", n.tick),
            &[],
        )
        .unwrap();
    // Six instances start and migrate at once.
    let table = n.tick.clone();
    let migrating = std::thread::spawn(move || {
        common::race(6, move |_| {
            let db = common::fresh_db();
            TickClaims::new(&db).with_table(&table)?.create_table()
        })
    });
    let mut watch = client();
    let waiting = format!(
        "SELECT 1 FROM pg_locks WHERE relation = to_regclass('\"{}\"') AND mode = \
         'AccessExclusiveLock' AND NOT granted",
        n.tick
    );
    common::wait_for(
        "the migration to wait for its lock",
        Duration::from_secs(10),
        || (!watch.query(&waiting, &[]).unwrap().is_empty()).then_some(()),
    );
    // The previous release's claims of another job, one after another for 1.5 s (real time is the subject: the
    // migration's attempts come and go meanwhile), each bounded by a statement timeout far below
    // a TTL: a statement queued behind the waiting ALTER would wait for the whole transaction.
    let mut old = client();
    old.batch_execute("SET statement_timeout = '1s'").unwrap();
    let (start, mut longest, mut claims) = (std::time::Instant::now(), Duration::ZERO, 0);
    while start.elapsed() < Duration::from_millis(1500) {
        let sent = std::time::Instant::now();
        if let Err(e) = old.execute(&claim, &[]) {
            panic!("the previous release's claim waited past 1 s behind the migration: {e:?}");
        }
        longest = longest.max(sent.elapsed());
        claims += 1;
    }
    eprintln!("{claims} claims during the migration's attempts, the longest took {longest:?}");
    assert_eq!(comment(&n.tick).map(|c| c.contains("version 2")), None);
    fenced.commit().unwrap();
    for migrated in migrating.join().unwrap() {
        migrated.unwrap();
    }
    assert!(comment(&n.tick).unwrap().contains("schema version 2"));
}

/// Another application's table under the name given for a pgtenure table (a typo in a table
/// flag, a name already taken): refused by `migrate` and by the handles, and left as it was, not
/// given pgtenure's columns and record.
#[test]
fn another_applications_table_of_the_name_is_refused_and_left_alone() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    client()
        .batch_execute(&format!(
            "CREATE TABLE \"{p}\" (id int PRIMARY KEY, name text);
             INSERT INTO \"{p}\" VALUES (1, 'mine');
             CREATE TABLE \"{t}\" (job_id text PRIMARY KEY, owner text)",
            p = n.procs,
            t = n.tick
        ))
        .unwrap();
    let columns = |table: &str| -> Vec<String> {
        client()
            .query(
                "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND \
                 attnum > 0 AND NOT attisdropped ORDER BY attnum",
                &[&table],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let db = db();
    let err = migrations::migrate(&db, &tables_for(&n)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    assert!(err.to_string().contains(&n.tick), "{err}");
    assert!(
        err.to_string()
            .contains("lacks the columns tick, busy_until, token"),
        "{err}"
    );
    let units = Units::new(&db).with_tables(&n.procs, &n.units).unwrap();
    let err = units.create_tables().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    assert!(err.to_string().contains("process_id"), "{err}");
    let err = units.processes().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    assert!(
        err.to_string().contains("lacks the columns process_id"),
        "{err}"
    );
    assert_eq!(columns(&n.procs), ["id", "name"]);
    assert_eq!(columns(&n.tick), ["job_id", "owner"]);
    assert_eq!(comment(&n.procs), None);
    assert_eq!(comment(&n.tick), None);
    // Nothing else was made either: every table was read before any was changed.
    assert!(!common::table_exists(&mut client(), &n.lease));
}

/// A column a version added, dropped by hand from a table whose record says it is current: the
/// handles say which version the table is really at (not a 42703 naming a column), and `migrate`
/// runs the steps again instead of finding nothing to do.
#[test]
fn a_column_dropped_from_a_current_table_is_reported_and_migrate_restores_it() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    migrations::migrate(&db(), &tables_for(&n)).unwrap();
    client()
        .batch_execute(&format!(
            "ALTER TABLE \"{}\" DROP COLUMN settled; DROP TABLE \"{}_promotion\"",
            n.procs, n.lease
        ))
        .unwrap();
    let db = common::fresh_db();
    let leaser = Leaser::new(&db, Arc::new(Quiet), Config::default())
        .unwrap()
        .with_tables(&n.procs, &n.units)
        .unwrap();
    let err = leaser.heartbeat().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("schema version 2 (its record says 3"),
        "{text}"
    );
    assert!(text.contains("pgtenure migrate"), "{text}");
    let leases = Leases::new(&db).with_table(&n.lease).unwrap();
    let err = leases.try_acquire("k", Duration::from_secs(5)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
    let plans = migrations::plan(&db, &tables_for(&n)).unwrap();
    let procs = plans.iter().find(|p| p.kind() == "processes").unwrap();
    assert_eq!(
        (procs.recorded_version(), procs.version()),
        (Some(3), Some(2))
    );
    assert!(!procs.is_current(), "{procs}");
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    leaser.heartbeat().unwrap();
    assert!(leases
        .try_acquire("k", Duration::from_secs(5))
        .unwrap()
        .is_some());
    for plan in migrations::plan(&db, &tables_for(&n)).unwrap() {
        assert!(plan.is_current(), "{plan}");
    }
}

/// A comment shaped like pgtenure's record whose version cannot be read (out of range, negative):
/// neither believed nor overwritten with this build's version.
#[test]
fn an_unreadable_version_record_is_refused_and_kept() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    for version in ["99999999999", "-3"] {
        let record = format!("pgtenure: tick_claims table, schema version {version}");
        client()
            .batch_execute(&format!("COMMENT ON TABLE \"{}\" IS '{record}'", n.tick))
            .unwrap();
        let err = migrations::migrate(&db, &tables_for(&n)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema, "{err}");
        assert!(err.to_string().contains("version record"), "{err}");
        assert_eq!(comment(&n.tick).as_deref(), Some(record.as_str()));
        let ticks = TickClaims::new(&common::fresh_db())
            .with_table(&n.tick)
            .unwrap();
        assert_eq!(ticks.jobs().unwrap_err().kind(), ErrorKind::Schema);
    }
}

/// Serializes this file's grants on the schema: concurrent GRANTs (and the REVOKEs of a role's
/// DROP OWNED BY) on one schema can fail with "tuple concurrently updated".
static GRANTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Lets `role` create in the schema `public` (tried again if another test binary's grant on it
/// raced this one).
fn grant_create(role: &str) {
    let sql = format!("GRANT CREATE ON SCHEMA public TO {role}");
    for attempt in 1.. {
        match client().batch_execute(&sql) {
            Ok(()) => return,
            Err(e) if attempt < 5 => eprintln!("{sql}: {e}; again"),
            Err(e) => panic!("{sql}: {e}"),
        }
    }
}

/// Gives every table of `n` (and the sequences the oldest layout made) to `role`.
fn give_to(n: &Names, role: &str) {
    client()
        .batch_execute(&format!(
            "ALTER TABLE \"{t}\" OWNER TO {role}; ALTER TABLE \"{f}\" OWNER TO {role};
             ALTER TABLE \"{l}\" OWNER TO {role}; ALTER TABLE \"{e}\" OWNER TO {role};
             ALTER TABLE \"{p}\" OWNER TO {role}; ALTER TABLE \"{u}\" OWNER TO {role};
             ALTER TABLE \"{s}\" OWNER TO {role}; ALTER SEQUENCE \"{s}_token_seq\" OWNER TO {role};
             ALTER SEQUENCE \"{l}_token_seq\" OWNER TO {role};
             ALTER SEQUENCE \"{e}_term_seq\" OWNER TO {role}",
            t = n.tick,
            f = n.fire,
            l = n.lease,
            e = n.leader,
            p = n.procs,
            u = n.units,
            s = n.sema
        ))
        .unwrap();
}

/// A DBA migrating the application's tables as a superuser (or as a member of the owning role),
/// `pgtenure migrate` in a deploy step: the steps run as the tables' owner, so what they make (the
/// promotion records, the units' token sequence owned by its column) belongs to the owner, and the
/// application's role keeps using every table. It used to fail on the units table (a sequence
/// must have the same owner as its table, 55000) and leave promotion records the application's
/// role could not read (42501 on every grant).
#[test]
fn a_superuser_migrating_another_roles_tables_leaves_them_usable_by_it() {
    // Dropped last, after the role: its DROP OWNED BY revokes on the schema too.
    let _grants = GRANTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let app = common::Role::new(&mut tables, "read committed");
    make_all_v1(&n);
    give_to(&n, &app.name);
    // The owner made its tables, so it may create in their schema.
    grant_create(&app.name);
    migrations::migrate(&db(), &tables_for(&n)).unwrap();
    let owners: Vec<(String, String)> = client()
        .query(
            "SELECT relname::text, pg_get_userbyid(relowner)::text FROM pg_class \
              WHERE relname LIKE ANY ($1) AND relkind IN ('r', 'S') ORDER BY 1",
            &[&vec![
                format!("{}%", n.lease),
                format!("{}%", n.leader),
                format!("{}%", n.units),
            ]],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(owners.len(), 8, "{owners:?}");
    for (relation, owner) in &owners {
        assert_eq!(owner, &app.name, "{relation}");
    }
    let theirs = pgtenure::DbBuilder::from_config(app.config("app"))
        .build()
        .unwrap();
    let lease = Leases::new(&theirs)
        .with_table(&n.lease)
        .unwrap()
        .try_acquire("k", Duration::from_secs(5))
        .unwrap()
        .expect("the key is free");
    assert!(lease.token() > 0);
    let elector = Elector::new(&theirs).with_table(&n.leader).unwrap();
    assert!(elector.is_leader().unwrap());
    let units = Units::new(&theirs).with_tables(&n.procs, &n.units).unwrap();
    units.add(&[Unit::new("t", 1).unwrap()]).unwrap();
    let leaser = Leaser::new(&theirs, Arc::new(Quiet), common::hand_driven())
        .unwrap()
        .with_tables(&n.procs, &n.units)
        .unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    let owned = units.assignments().unwrap();
    assert_eq!(owned[0].owner.as_deref(), Some(leaser.process_id()));
    assert!(owned[0].token.is_some());
    for plan in migrations::plan(&theirs, &tables_for(&n)).unwrap() {
        assert!(plan.is_current(), "{plan}");
    }
}

/// A role whose statement_timeout is shorter than another instance's migration: waiting for that
/// migration (pgtenure's advisory lock) is waited out by trying again, not failed with 57014, so
/// every instance starting at once still starts.
#[test]
fn migrating_at_once_under_a_short_statement_timeout_succeeds() {
    let _grants = GRANTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let app = common::Role::new(&mut tables, "read committed");
    client()
        .batch_execute(&format!(
            "ALTER ROLE {} SET statement_timeout = '50ms'",
            app.name
        ))
        .unwrap();
    make_all_v1(&n);
    give_to(&n, &app.name);
    grant_create(&app.name);
    // Another instance's slow migration holds the lock for 300 ms.
    let mut slow = client();
    let mut holding = slow.transaction().unwrap();
    holding
        .execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&0x7067_7465_6e75_7265_i64],
        )
        .unwrap();
    let t = tables_for(&n);
    let (config, role) = (app.config("app"), app.name.clone());
    let racing = std::thread::spawn(move || {
        common::race(6, move |_| {
            let db = pgtenure::DbBuilder::from_config(config.clone())
                .max_size(2)
                .unwrap()
                .build()
                .unwrap();
            migrations::migrate(&db, &t).map(|plans| plans.len())
        })
    });
    // An instance waits on the lock (on a loaded machine the race may take a while to start)...
    let mut watcher = client();
    common::wait_for(
        "an instance waiting on the migration lock",
        Duration::from_secs(10),
        || {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE usename = $1 AND wait_event_type = 'Lock'",
                    &[&role],
                )
                .unwrap()
                .get(0);
            (waiting > 0).then_some(())
        },
    );
    // ...and real time is the subject: the others wait past their 50 ms statement timeout.
    std::thread::sleep(Duration::from_millis(300));
    holding.commit().unwrap();
    for result in racing.join().unwrap() {
        assert_eq!(result.unwrap(), 7);
    }
    for plan in migrations::plan(&db(), &tables_for(&n)).unwrap() {
        assert_eq!(plan.recorded_version(), Some(plan.target()), "{plan}");
    }
}

/// Indexes dropped by hand (the statements work without them, only slower) are made again by
/// `migrate`, as a dropped promotion record is, instead of failing every instance's startup.
#[test]
fn indexes_dropped_by_hand_are_made_again() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    let db = db();
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    client()
        .batch_execute(&format!(
            "DROP INDEX \"{u}_claimable\"; DROP INDEX \"{u}_owner\"; DROP INDEX \"{f}_expires_at\"",
            u = n.units,
            f = n.fire
        ))
        .unwrap();
    migrations::migrate(&db, &tables_for(&n)).unwrap();
    let indexes: Vec<String> = client()
        .query(
            "SELECT pg_get_indexdef(to_regclass(n)) FROM unnest($1::text[]) AS n",
            &[&vec![
                format!("\"{}_claimable\"", n.units),
                format!("\"{}_owner\"", n.units),
                format!("\"{}_expires_at\"", n.fire),
            ]],
        )
        .unwrap()
        .iter()
        .map(|r| r.get::<_, Option<String>>(0).expect("the index exists"))
        .collect();
    assert!(indexes[1].contains("(process_id, slot)"), "{indexes:?}");
    assert!(indexes[2].contains("(expires_at)"), "{indexes:?}");
}

/// Every instance's startup `migrate` on tables already at this version takes no lock on them: it
/// returns while another transaction holds every table in ACCESS EXCLUSIVE mode (so it never waits
/// behind, nor queues the fleet behind, anything).
#[test]
fn migrating_current_tables_takes_no_lock_on_them() {
    let mut tables = Tables::new();
    let n = tables.every_primitive();
    migrations::migrate(&db(), &tables_for(&n)).unwrap();
    let mut locker = client();
    let mut locked = locker.transaction().unwrap();
    locked
        .batch_execute(&format!(
            "LOCK TABLE \"{}\", \"{}\", \"{}\", \"{}\", \"{}\", \"{}\" IN ACCESS EXCLUSIVE MODE",
            n.tick, n.fire, n.lease, n.leader, n.procs, n.units
        ))
        .unwrap();
    let t = tables_for(&n);
    let started = std::time::Instant::now();
    let migrating = std::thread::spawn(move || migrations::migrate(&common::fresh_db(), &t));
    common::wait_for("migrate to return", Duration::from_secs(10), || {
        migrating.is_finished().then_some(())
    });
    eprintln!("migrate returned after {:?}", started.elapsed());
    for plan in migrating.join().unwrap().unwrap() {
        assert!(plan.is_current(), "{plan}");
    }
    locked.rollback().unwrap();
}
