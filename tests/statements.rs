//! Statements are prepared once per server connection and planned once, in each statement mode: a
//! generic plan after the first few executions, a missing or outdated prepared statement recovered
//! before anything ran, one round trip per operation in steady state, and prepared statements off
//! on request; `Auto` proves a connection direct before it uses protocol-level statements.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::proxy::{database_addr, Proxy};
use common::{client, Names, Quiet, Tables};
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, tick_claims::TickClaims, Db,
    DbBuilder, StatementMode,
};

/// Every primitive on its own tables, on one pool.
struct Fleet {
    ticks: TickClaims,
    fires: FireClaims,
    leases: Leases,
    elector: Elector,
    units: Units,
    leaser: Leaser,
    lease_t: String,
    leader_t: String,
    procs_t: String,
    units_t: String,
    _tables: Tables,
}

impl Fleet {
    fn new(db: &Db) -> Fleet {
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
        let fleet = Fleet {
            ticks: TickClaims::new(db).with_table(&tick_t).unwrap(),
            fires: FireClaims::new(db).with_table(&fire_t).unwrap(),
            leases: Leases::new(db).with_table(&lease_t).unwrap(),
            elector: Elector::new(db).with_table(&leader_t).unwrap(),
            units: Units::new(db).with_tables(&procs_t, &units_t).unwrap(),
            leaser: Leaser::new(db, Arc::new(Quiet), common::hand_driven())
                .unwrap()
                .with_tables(&procs_t, &units_t)
                .unwrap(),
            lease_t,
            leader_t,
            procs_t,
            units_t,
            _tables: tables,
        };
        fleet.ticks.create_table().unwrap();
        fleet.fires.create_table().unwrap();
        fleet.leases.create_table().unwrap();
        fleet.elector.create_table().unwrap();
        fleet.units.create_tables().unwrap();
        fleet
    }

    /// Each operation once (round `n`), asserting what each returns.
    fn exercise(&self, n: u64) {
        let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
        let won = self
            .ticks
            .claim("job", tick, Duration::from_secs(60))
            .unwrap()
            .expect("a later tick of a released job is won");
        assert_eq!(won.token(), n as i64 + 1);
        assert!(self
            .ticks
            .claim("job", tick, Duration::from_secs(60))
            .unwrap()
            .is_none());
        won.release().unwrap();
        assert!(self.fires.claim(&format!("f@{n}")).unwrap());
        assert!(!self.fires.claim(&format!("f@{n}")).unwrap());
        self.fires.purge(Duration::from_secs(3600)).unwrap();
        let key = format!("k{n}");
        assert!(self
            .leases
            .try_acquire(&key, Duration::from_secs(60))
            .unwrap()
            .is_some());
        let renewed = self
            .leases
            .renew(&[key.as_str(), "absent"], Duration::from_secs(60))
            .unwrap();
        assert_eq!(renewed.held().collect::<Vec<_>>(), [key.as_str()]);
        assert_eq!(renewed.lost().collect::<Vec<_>>(), ["absent"]);
        assert!(self.leases.supersede(&key).unwrap());
        assert!(self.leases.release(&key).unwrap());
        let lease = self
            .leases
            .acquire(&format!("m{n}"), Duration::from_secs(60))
            .unwrap()
            .expect("a free key");
        lease.release().unwrap();
        assert!(self.elector.is_leader().unwrap());
        let leader = self.elector.leader().unwrap().expect("a leader");
        assert_eq!(leader.holder, self.elector.holder());
        self.elector.resign().unwrap();
        let shard = n as i32;
        assert_eq!(
            self.units.add(&[Unit::new("t", shard).unwrap()]).unwrap(),
            1
        );
        assert!(self
            .units
            .set_weight(&Unit::new("t", shard).unwrap(), 2)
            .unwrap());
        self.leaser.heartbeat().unwrap();
        let report = self.leaser.tick().unwrap();
        // Released and deleted at the end of the last round: it claims every unit again.
        assert_eq!(report.claimed as u64, n + 1, "round {n}");
        self.leaser.sweep().unwrap();
        assert_eq!(self.leaser.release().unwrap().len(), n as usize + 1);
        self.leaser.delete_process().unwrap();
        assert_eq!(
            self.units
                .remove(&[Unit::new("t", 10_000).unwrap()])
                .unwrap(),
            0
        );
    }
}

/// A pool of one connection, so the test can read that connection's prepared statements.
fn one_connection(url_or_proxy: pgtenure::postgres::Config, mode: StatementMode) -> Db {
    DbBuilder::from_config(url_or_proxy)
        .max_size(1)
        .unwrap()
        .statement_mode(mode)
        .build()
        .unwrap()
}

/// A pool of one connection to `url` (a connection string: its own statement mode, if any).
fn one_connection_at(url: &str) -> Db {
    Db::builder(url)
        .unwrap()
        .max_size(1)
        .unwrap()
        .build()
        .unwrap()
}

/// The prepared statements of the pool's one connection, SQL-level (named `pgt_…`) and
/// protocol-level alike: (name, generic plans, custom plans, `PREPARE` statement). A
/// protocol-level statement's `PREPARE` is made up from its text and parameter types. The query is
/// sent unnamed, so that it is not one of them.
fn prepared(db: &Db) -> Vec<(String, i64, i64, String)> {
    prepared_with_arity(db)
        .into_iter()
        .map(|(name, generic, custom, prepare, _)| (name, generic, custom, prepare))
        .collect()
}

fn prepared_with_arity(db: &Db) -> Vec<(String, i64, i64, String, usize)> {
    let mut conn = db.connection().unwrap();
    conn.query_typed(
        "SELECT name, generic_plans, custom_plans,
                CASE WHEN from_sql THEN statement
                     WHEN cardinality(parameter_types) = 0
                     THEN format('PREPARE %s AS %s', name, statement)
                     ELSE format('PREPARE %s (%s) AS %s', name,
                                 array_to_string(parameter_types::text[], ', '), statement)
                END,
                cardinality(parameter_types)::int8
           FROM pg_prepared_statements
          WHERE name LIKE 'pgt\\_%' OR NOT from_sql
          ORDER BY name",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| {
        (
            r.get(0),
            r.get(1),
            r.get(2),
            r.get(3),
            r.get::<_, i64>(4) as usize,
        )
    })
    .collect()
}

/// Each statement prepared on the pool's one connection, planned afresh in a new session as a
/// generic plan with sequential scans priced out: the sequential scans left, by statement (its
/// header's first line). A scan left there is one no index can replace.
fn generic_scans(db: &Db) -> Vec<(String, String)> {
    let mut fresh = client();
    fresh
        .batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off")
        .unwrap();
    let mut scans = Vec::new();
    for (i, (name, _, _, prepare, params)) in prepared_with_arity(db).into_iter().enumerate() {
        // Under a name of its own in this session.
        let checked = format!("checked_{i}");
        fresh
            .batch_execute(&prepare.replacen(&name, &checked, 1))
            .unwrap();
        let nulls = vec!["NULL"; params].join(", ");
        let args = if params == 0 {
            String::new()
        } else {
            format!("({nulls})")
        };
        let plan: Vec<String> = fresh
            .query_typed(&format!("EXPLAIN EXECUTE {checked}{args}"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let what = prepare
            .split_once("-- ")
            .map(|(_, header)| header.lines().next().unwrap_or_default().to_owned())
            .unwrap_or_default();
        for line in plan.iter().filter(|l| l.contains("Seq Scan")) {
            scans.push((what.clone(), line.trim().to_owned()));
        }
    }
    scans
}

fn direct_config() -> pgtenure::postgres::Config {
    common::direct_url().parse().unwrap()
}

#[test]
fn every_statement_is_prepared_once_per_connection_and_settles_on_a_generic_plan_at_protocol_level()
{
    // Auto, on a direct connection: proven, protocol-level.
    let db = one_connection(direct_config(), StatementMode::Auto);
    every_statement_settles_on_a_generic_plan(&db, false);
    let modes = db.statement_modes();
    assert_eq!(
        (modes.protocol, modes.sql, modes.pooler_found),
        (1, 0, false),
        "{modes}"
    );
}

#[test]
fn every_statement_is_prepared_once_per_connection_and_settles_on_a_generic_plan_at_sql_level() {
    let db = one_connection(direct_config(), StatementMode::Sql);
    every_statement_settles_on_a_generic_plan(&db, true);
    let modes = db.statement_modes();
    assert_eq!((modes.protocol, modes.sql), (0, 1), "{modes}");
}

/// Every operation, then the plans of the statements prepared on `db`'s one connection (by SQL
/// `PREPARE` when `sql_level`, else by the protocol).
fn every_statement_settles_on_a_generic_plan(db: &Db, sql_level: bool) {
    let fleet = Fleet::new(db);
    for n in 0..10 {
        fleet.exercise(n);
    }
    // A managed lease renews on this connection (a third of its TTL at a time).
    let lease = fleet
        .leases
        .acquire("renewed", Duration::from_millis(300))
        .unwrap()
        .unwrap();
    common::wait_for("ten renewals", Duration::from_secs(20), || {
        let runs: i64 = prepared(db)
            .iter()
            .filter(|(_, _, _, text)| text.contains("A managed lease's renewal"))
            .map(|(_, g, c, _)| g + c)
            .max()
            .unwrap_or(0);
        (runs >= 10).then_some(())
    });
    lease.release().unwrap();
    // Another process joins and leaves, again and again: this one sheds to its fair share each time.
    let other_db = Db::connect(&common::direct_url()).unwrap();
    let other = Leaser::new(&other_db, Arc::new(Quiet), common::hand_driven())
        .unwrap()
        .with_tables(&fleet.procs_t, &fleet.units_t)
        .unwrap();
    let exercised: Vec<Unit> = (0..10).map(|s| Unit::new("t", s).unwrap()).collect();
    assert_eq!(fleet.units.remove(&exercised).unwrap(), 10);
    fleet
        .units
        .add(
            &(100..120)
                .map(|s| Unit::new("t", s).unwrap())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    fleet.leaser.heartbeat().unwrap();
    for _ in 0..8 {
        common::wait_for("all units claimed", Duration::from_secs(10), || {
            fleet.leaser.tick().unwrap();
            (fleet.leaser.owned().len() == 20).then_some(())
        });
        other.heartbeat().unwrap();
        common::wait_for("a shed to the fair share", Duration::from_secs(10), || {
            fleet.leaser.tick().unwrap();
            (fleet.leaser.owned().len() == 10).then_some(())
        });
        other.delete_process().unwrap();
    }
    let statements = prepared(db);
    for (name, generic, custom, text) in &statements {
        let first_line = text
            .lines()
            .find(|l| !l.starts_with("PREPARE") && !l.starts_with("--"));
        println!("{name}: {generic} generic, {custom} custom: {first_line:?}");
    }
    // Under the generic plan, with sequential scans priced out, which statements still scan a
    // table: those whose job is to scan (sweeps, counts over the processes table).
    let scans = generic_scans(db);
    for (what, scan) in &scans {
        println!("{what}\n    {scan}");
        // The processes table holds a row per process (tens, not thousands): the fair-share stats
        // and the orphan lookup read all of it by design. The once-a-minute sweep of lapsed leases
        // scans the lease table by design. The promotion records beside the lease and leader
        // tables have one row, written once per promotion: a page, read whole.
        let by_design = scan.contains(&format!("Seq Scan on {}", fleet.procs_t))
            || what.starts_with("Releases as release.sql does")
            || scan.contains("_promotion p");
        assert!(
            by_design,
            "no index serves this generic plan: {what}\n{scan}"
        );
    }
    // Tick: claim, release; fire: claim, purge; leases: acquire, renew, renew_tenure (not run
    // here), release, supersede; elector: is_leader, leader, resign; membership: add, remove,
    // set_weight, heartbeat, stats, owned, claim, sweep, release, delete_process.
    assert!(
        statements.len() >= 20,
        "only {} statements were prepared",
        statements.len()
    );
    for (name, generic, custom, text) in &statements {
        assert!(
            text.starts_with(&format!("PREPARE {name} ")),
            "{name} is not pgtenure's: {text}"
        );
        assert_eq!(
            name.starts_with("pgt_"),
            sql_level,
            "{name}: prepared in the other mode"
        );
        // PostgreSQL plans the first five executions for their values, then keeps the generic
        // plan unless it costs clearly more: from then on nothing is planned again.
        let runs = generic + custom;
        if runs >= 6 {
            assert!(
                *custom <= 5,
                "{name} is planned at every call ({custom} custom plans of {runs}): {text}"
            );
        }
    }
}

#[test]
fn a_statement_missing_on_its_connection_is_prepared_again_before_anything_ran_at_sql_level() {
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let db = one_connection(proxy.config(), StatementMode::Sql);
    let fleet = Fleet::new(&db);
    fleet.exercise(0);
    fleet.exercise(1);
    let before = proxy.round_trips();
    assert!(fleet.elector.is_leader().unwrap());
    assert_eq!(proxy.round_trips() - before, 1, "prepared: one round trip");
    // Someone resets the session (a pooler's DISCARD ALL, a user's DEALLOCATE ALL).
    db.connection()
        .unwrap()
        .batch_execute("DEALLOCATE ALL")
        .unwrap();
    let before = proxy.round_trips();
    assert!(fleet.elector.is_leader().unwrap(), "still the leader");
    assert_eq!(
        proxy.round_trips() - before,
        3,
        "EXECUTE refused (26000, nothing ran), PREPARE, EXECUTE"
    );
    let before = proxy.round_trips();
    assert!(fleet.elector.is_leader().unwrap());
    assert_eq!(proxy.round_trips() - before, 1);
    // A term is kept across the three: nothing ran twice, nothing was lost.
    let terms: i64 = client()
        .query_one(&format!("SELECT term FROM {}", fleet.leader_t), &[])
        .unwrap()
        .get(0);
    assert_eq!(Some(terms), fleet.elector.term());
    fleet.exercise(2);
}

#[test]
fn a_reset_session_prepares_its_protocol_level_statements_again_before_anything_ran() {
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let db = one_connection(proxy.config(), StatementMode::Protocol);
    let fleet = Fleet::new(&db);
    fleet.exercise(0);
    fleet.exercise(1);
    let before = proxy.round_trips();
    assert!(fleet.elector.is_leader().unwrap());
    assert_eq!(proxy.round_trips() - before, 1, "prepared: one round trip");
    for (round, reset) in [(2, "DEALLOCATE ALL"), (3, "DISCARD ALL")] {
        db.connection().unwrap().batch_execute(reset).unwrap();
        let before = proxy.round_trips();
        assert!(fleet.elector.is_leader().unwrap(), "still the leader");
        assert_eq!(
            proxy.round_trips() - before,
            4,
            "after {reset}: Bind refused (26000, nothing ran), the backend asked (the same one), \
             Parse, Bind"
        );
        let before = proxy.round_trips();
        assert!(fleet.elector.is_leader().unwrap());
        assert_eq!(proxy.round_trips() - before, 1, "after {reset}");
        // The term is kept: nothing ran twice, nothing was lost.
        let term: i64 = client()
            .query_one(&format!("SELECT term FROM {}", fleet.leader_t), &[])
            .unwrap()
            .get(0);
        assert_eq!(Some(term), fleet.elector.term());
        fleet.exercise(round);
    }
    let modes = db.statement_modes();
    assert_eq!(
        (modes.protocol, modes.pooler_found),
        (1, false),
        "a reset session is not a pooler: {modes}"
    );
}

#[test]
fn a_statement_whose_table_changed_is_prepared_afresh() {
    for mode in [StatementMode::Auto, StatementMode::Sql] {
        let db = one_connection(direct_config(), mode);
        let fleet = Fleet::new(&db);
        fleet.exercise(0);
        assert!(fleet.elector.is_leader().unwrap());
        assert!(fleet.elector.leader().unwrap().is_some());
        // The cached plan's result type changes: PostgreSQL refuses to run the old prepared
        // statement (0A000) rather than return other columns.
        client()
            .batch_execute(&format!(
                "ALTER TABLE {} ALTER COLUMN holder TYPE varchar(2000)",
                fleet.leader_t
            ))
            .unwrap();
        let leader = fleet.elector.leader().unwrap().expect("still led");
        assert_eq!(leader.holder, fleet.elector.holder(), "{mode}");
        assert!(fleet.elector.is_leader().unwrap());
        fleet.exercise(1);
        let modes = db.statement_modes();
        assert_eq!(
            modes.protocol == 1,
            mode == StatementMode::Auto,
            "{mode}: {modes}"
        );
    }
}

#[test]
fn unprepared_nothing_is_prepared_and_each_operation_is_one_round_trip() {
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let config = proxy.config();
    // The mode from the connection string, beside the driver's own settings.
    // sslmode=disable: the proxy counts protocol messages, which TLS would hide (a workspace
    // build has the feature tls, and a server with ssl = on is asked for it by default).
    let url = format!(
        "host=127.0.0.1 port={} user={} dbname={} sslmode=disable statement_mode=unprepared",
        proxy.port(),
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres"),
    );
    let db = one_connection_at(&url);
    assert_eq!(db.statement_mode(), StatementMode::Unprepared);
    let fleet = Fleet::new(&db);
    fleet.exercise(0);
    let before = proxy.round_trips();
    assert!(fleet
        .leases
        .try_acquire("first", Duration::from_secs(5))
        .unwrap()
        .is_some());
    assert_eq!(proxy.round_trips() - before, 1, "no PREPARE at first use");
    fleet.exercise(1);
    assert!(prepared(&db).is_empty());
    let modes = db.statement_modes();
    assert_eq!((modes.unprepared, modes.protocol, modes.sql), (1, 0, 0));
    let _ = &fleet.lease_t;
}

/// `Auto` uses protocol-level statements only where the server itself accepted the connection at
/// the configured host and port: a direct connection, not one through a proxy on another port.
#[test]
fn auto_proves_a_connection_direct_before_it_uses_protocol_level_statements() {
    let direct = one_connection(direct_config(), StatementMode::Auto);
    let fleet = Fleet::new(&direct);
    fleet.exercise(0);
    assert!(prepared(&direct)
        .iter()
        .all(|(name, ..)| !name.starts_with("pgt_")));
    assert_eq!(direct.statement_modes().protocol, 1);

    let proxy = Proxy::start(0, database_addr()).unwrap();
    let proxied = one_connection(proxy.config(), StatementMode::Auto);
    let fleet = Fleet::new(&proxied);
    fleet.exercise(0);
    fleet.exercise(1);
    let statements = prepared(&proxied);
    assert!(
        !statements.is_empty() && statements.iter().all(|(name, ..)| name.starts_with("pgt_")),
        "{statements:?}"
    );
    let modes = proxied.statement_modes();
    assert_eq!((modes.protocol, modes.sql), (0, 1), "{modes}");
    // Steady state: one round trip per operation.
    let before = proxy.round_trips();
    assert!(fleet.elector.is_leader().unwrap());
    assert_eq!(proxy.round_trips() - before, 1);
}

/// The statement a `Db` sends while it connects (whether its server folds the timeline into
/// tokens) obeys the statement mode like every other: behind something that is not proven direct,
/// nothing is prepared under a name the driver chose (a pooler could hand that name's statement to
/// another client), and `statement_modes` counts the connection it ran on.
#[test]
fn connecting_prepares_nothing_under_a_driver_chosen_name_where_the_mode_forbids_it() {
    for (mode, want) in [
        (StatementMode::Auto, (0, 1, 0)),
        (StatementMode::Sql, (0, 1, 0)),
        (StatementMode::Unprepared, (0, 0, 1)),
    ] {
        let proxy = Proxy::start(0, database_addr()).unwrap();
        let db = one_connection(proxy.config(), mode);
        let modes = db.statement_modes();
        assert_eq!(
            (modes.protocol, modes.sql, modes.unprepared),
            want,
            "{mode:?}, right after connecting: {modes}"
        );
        let fleet = Fleet::new(&db);
        fleet.exercise(0);
        assert_eq!(
            proxy.driver_named_statements(),
            0,
            "{mode:?}: a statement was prepared under a driver-chosen name"
        );
        let modes = db.statement_modes();
        assert_eq!(
            (modes.protocol, modes.sql, modes.unprepared),
            want,
            "{mode:?}: {modes}"
        );
    }
    // Proven direct, protocol-level statements are the point.
    let db = one_connection(direct_config(), StatementMode::Auto);
    let modes = db.statement_modes();
    assert_eq!((modes.protocol, modes.sql), (1, 0), "{modes}");
}

/// Over a Unix socket, `Auto` proves a connection direct by the server's socket directory and
/// port.
#[test]
fn auto_proves_a_unix_socket_connection_direct_in_the_servers_directory() {
    let server = pgtenure::testing::TempPostgres::start().unwrap();
    let url = format!(
        "host={} port={} user=postgres dbname=postgres",
        server.dir().display(),
        server.port()
    );
    let db = one_connection_at(&url);
    let fleet = Fleet::new(&db);
    fleet.exercise(0);
    let modes = db.statement_modes();
    assert_eq!((modes.protocol, modes.sql), (1, 0), "{modes}");
    // The same server by TCP on another port than the configured one (a mapped port) is unproven.
    let proxy = Proxy::start(0, ([127, 0, 0, 1], server.port()).into()).unwrap();
    let mut config = proxy.config();
    config.dbname("postgres");
    let proxied = one_connection(config, StatementMode::Auto);
    assert!(proxied.connection().is_ok());
    let fleet = Fleet::new(&proxied);
    fleet.exercise(0);
    let modes = proxied.statement_modes();
    assert_eq!((modes.protocol, modes.sql), (0, 1), "{modes}");
}

/// Clones of one `Db` in different modes share its pool: a connection that passes from one to the
/// other has its way decided again, without asking the session again where it runs (one more
/// round trip at every switch).
#[test]
fn clones_in_different_modes_share_connections_at_one_round_trip_per_operation() {
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let mut tables = Tables::new();
    let Names {
        lease: lease_t,
        leader: other_t,
        ..
    } = tables.every_primitive();
    let protocol = one_connection(proxy.config(), StatementMode::Protocol);
    let sql = protocol.clone().with_statement_mode(StatementMode::Sql);
    let a = Leases::new(&protocol).with_table(&lease_t).unwrap();
    let b = Leases::new(&sql).with_table(&other_t).unwrap();
    a.create_table().unwrap();
    b.create_table().unwrap();
    let ttl = Duration::from_secs(60);
    let _held_a = a.try_acquire("k", ttl).unwrap().expect("free");
    let _held_b = b.try_acquire("k", ttl).unwrap().expect("free");
    for _ in 0..2 {
        a.renew(&["k"], ttl).unwrap();
        b.renew(&["k"], ttl).unwrap();
    }
    let before = proxy.round_trips();
    for _ in 0..10 {
        assert_eq!(a.renew(&["k"], ttl).unwrap().held().count(), 1);
        assert_eq!(b.renew(&["k"], ttl).unwrap().held().count(), 1);
    }
    assert_eq!(
        proxy.round_trips() - before,
        20,
        "one round trip per renewal, whichever clone's mode the connection last served"
    );
}

/// A pooler that resets every server connection after each transaction (PgBouncer with
/// `server_reset_query_always`) takes every prepared statement away before its next use: each
/// call would pay three or four round trips, then seven behind a pooler. Three calls in a row that
/// find theirs gone make the connection send its statements unprepared: one round trip again.
#[test]
fn statements_that_keep_vanishing_are_sent_unprepared_after_three_calls() {
    for mode in [StatementMode::Sql, StatementMode::Protocol] {
        let proxy = Proxy::start(0, database_addr()).unwrap();
        let db = one_connection(proxy.config(), mode);
        let fleet = Fleet::new(&db);
        fleet.exercise(0);
        let reset_then_poll = || {
            db.connection()
                .unwrap()
                .batch_execute("DISCARD ALL")
                .unwrap();
            let before = proxy.round_trips();
            assert!(
                fleet.elector.is_leader().unwrap(),
                "{mode}: still the leader"
            );
            proxy.round_trips() - before
        };
        for call in 1..=3 {
            assert!(reset_then_poll() >= 3, "{mode}: call {call} found it gone");
            assert_eq!(
                db.statement_modes().vanishing_found,
                call == 3,
                "{mode}: after call {call}"
            );
        }
        assert_eq!(reset_then_poll(), 1, "{mode}: sent unprepared");
        let before = proxy.round_trips();
        assert!(fleet.elector.is_leader().unwrap());
        assert_eq!(proxy.round_trips() - before, 1, "{mode}");
        assert!(prepared(&db).is_empty(), "{mode}: {:?}", prepared(&db));
        let modes = db.statement_modes();
        assert!(!modes.pooler_found, "{mode}: a reset is not a pooler");
        fleet.exercise(1);
    }
}
