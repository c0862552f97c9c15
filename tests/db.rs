//! The pool, migrations and error classification against a real PostgreSQL.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, SystemTime};

use common::{client, db, wait_for, Role, Tables};
use pgtenure::postgres::{self, NoTls};
use pgtenure::testing::{parked_connections, waiting_checkouts};
use pgtenure::{fire_claims::FireClaims, tick_claims::TickClaims, Db, ErrorKind};

fn setting(db: &Db, name: &str) -> String {
    let mut conn = db.connection().unwrap();
    conn.query_one("SELECT current_setting($1)", &[&name])
        .unwrap()
        .get(0)
}

#[test]
fn connect_sets_application_name_and_pins_read_committed() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "serializable");
    let mut config = role.config("pgtenure");
    let pinned = pgtenure::DbBuilder::from_config(config.clone())
        .build()
        .unwrap();
    assert_eq!(setting(&pinned, "transaction_isolation"), "read committed");
    assert_eq!(setting(&db(), "application_name"), "pgtenure");

    config.application_name("unpinned");
    let unpinned = pgtenure::DbBuilder::from_config(config)
        .read_committed(false)
        .build()
        .unwrap();
    assert_eq!(setting(&unpinned, "transaction_isolation"), "serializable");
    assert_eq!(setting(&unpinned, "application_name"), "unpinned");
}

#[test]
fn a_serialization_failure_is_classified_and_nothing_is_granted() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "repeatable read");
    let table = tables.name("tick");
    let owner_claims = TickClaims::new(&db()).with_table(&table).unwrap();
    owner_claims.create_table().unwrap();
    client()
        .batch_execute(&format!("GRANT ALL ON {table} TO {}", role.name))
        .unwrap();
    let app = format!("{}_app", role.name);
    let raw = pgtenure::DbBuilder::from_config(role.config(&app))
        .read_committed(false)
        .build()
        .unwrap();
    let racer = TickClaims::new(&raw).with_table(&table).unwrap();
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let first = owner_claims
        .claim("job", tick, Duration::from_millis(1))
        .unwrap();
    assert!(first.is_some());

    // Hold the row so the racer's statement takes its snapshot, then waits on the lock.
    let mut blocker = client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE job_id = 'job' FOR UPDATE"),
        &[],
    )
    .unwrap();
    let handle = thread::spawn(move || {
        racer.claim(
            "job",
            tick + Duration::from_secs(60),
            Duration::from_secs(60),
        )
    });
    wait_for(
        "the racer to wait on the row lock",
        Duration::from_secs(10),
        || {
            let waiting: bool = client()
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                 WHERE application_name = $1 AND wait_event_type = 'Lock')",
                    &[&app],
                )
                .unwrap()
                .get(0);
            waiting.then_some(())
        },
    );
    tx.execute(
        &format!("UPDATE {table} SET token = token + 100 WHERE job_id = 'job'"),
        &[],
    )
    .unwrap();
    tx.commit().unwrap();
    let err = handle.join().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Serialization, "{err}");
    assert!(err.is_serialization());
    assert_eq!(
        err.code(),
        Some(&postgres::error::SqlState::T_R_SERIALIZATION_FAILURE)
    );
    let token: i64 = client()
        .query_one(&format!("SELECT token FROM {table}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(token, 101, "the racer changed nothing");
}

#[test]
fn bad_urls_and_unreachable_servers_are_told_apart() {
    assert_eq!(
        Db::connect("postgres://[::1").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let err = Db::builder(&url)
        .unwrap()
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        err.to_string().contains(&format!(
            "could not connect to 127.0.0.1:{port} within 500ms: error connecting to server: "
        )) && err.to_string().to_lowercase().contains("refused"),
        "the reason is told: {err}"
    );

    // A lazy pool builds without a server; its first operation fails as a connection error.
    let lazy = Db::builder(&url)
        .unwrap()
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build_lazy()
        .unwrap();
    let err = FireClaims::new(&lazy).claim("k@1").unwrap_err();
    assert!(err.is_connection(), "{err}");
}

#[test]
fn migrate_is_idempotent_and_safe_from_eight_threads_on_an_empty_database() {
    let mut tables = Tables::new();
    let name = tables.name("db");
    client()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let mut config: postgres::Config = common::url().parse().unwrap();
    config.dbname(&name);
    let fresh = pgtenure::DbBuilder::from_config(config.clone())
        .max_size(8)
        .unwrap()
        .build()
        .unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let (db, barrier) = (fresh.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                pgtenure::migrate(&db)
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    pgtenure::migrate(&fresh).unwrap();
    let mut c = config.connect(NoTls).unwrap();
    let tables_made: Vec<String> = c
        .query(
            "SELECT relname::text FROM pg_class WHERE relname LIKE 'pgtenure%' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        tables_made,
        vec![
            "pgtenure_fire_claims",
            "pgtenure_fire_claims_expires_at",
            "pgtenure_fire_claims_pkey",
            "pgtenure_leader",
            "pgtenure_leader_pkey",
            "pgtenure_leader_promotion",
            "pgtenure_leader_promotion_pkey",
            "pgtenure_leader_term_seq",
            "pgtenure_leases",
            "pgtenure_leases_pkey",
            "pgtenure_leases_promotion",
            "pgtenure_leases_promotion_pkey",
            "pgtenure_leases_token_seq",
            "pgtenure_processes",
            "pgtenure_processes_pkey",
            "pgtenure_semaphores",
            "pgtenure_semaphores_pkey",
            "pgtenure_semaphores_promotion",
            "pgtenure_semaphores_promotion_pkey",
            "pgtenure_semaphores_token_seq",
            "pgtenure_tick_claims",
            "pgtenure_tick_claims_pkey",
            "pgtenure_units",
            "pgtenure_units_claimable",
            "pgtenure_units_owner",
            "pgtenure_units_pkey",
            "pgtenure_units_token_seq",
        ]
    );
    assert!(TickClaims::new(&fresh)
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap()
        .is_some());
    drop((c, fresh));
    client()
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .unwrap();
}

#[test]
fn create_table_needs_no_create_privilege_once_the_table_exists() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "read committed");
    let schema = tables.name("schema");
    let table = format!("{schema}.ticks");
    client()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    // Dropped before the role, which has privileges on it.
    let _schema = DropSchema(schema.clone());
    TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    client()
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO {0}; GRANT ALL ON {table} TO {0}",
            role.name
        ))
        .unwrap();
    let limited = pgtenure::DbBuilder::from_config(role.config("limited"))
        .build()
        .unwrap();
    let claims = TickClaims::new(&limited).with_table(&table).unwrap();
    claims.create_table().unwrap();
    assert!(claims
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap()
        .is_some());
    let other = format!("{schema}.other");
    let err = TickClaims::new(&limited)
        .with_table(&other)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert_eq!(
        err.code(),
        Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // The server's reason and SQLSTATE, after pgtenure's words, and advice that is the fix.
    assert!(
        err.to_string().starts_with(&format!(
            "migrate tick_claims table failed: permission denied for schema {schema} (42501); grant"
        )),
        "{err}"
    );
    let missing = TickClaims::new(&limited)
        .with_table("no_such_schema_here.ticks")
        .unwrap()
        .create_table()
        .unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("schema \"no_such_schema_here\" does not exist (3F000); create the schema"),
        "{missing}"
    );
    drop(limited);
}

/// Drops a schema of a test's own when dropped.
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let _ = client().batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0));
    }
}

/// What waiting cannot fix is reported at once, with the server's reason and SQLSTATE; bad URLs say
/// what is wrong with them.
#[test]
fn connecting_fails_at_once_with_the_reason_when_waiting_cannot_fix_it() {
    let base: postgres::Config = common::direct_url().parse().unwrap();
    let cases: Vec<(&str, postgres::Config, &str, &str)> = vec![
        (
            "unknown database",
            {
                let mut c = base.clone();
                c.dbname("pgtenure_no_such_database");
                c
            },
            "(3D000); create the database",
            "3D000",
        ),
        (
            "unknown role",
            {
                let mut c = base.clone();
                c.user("pgtenure_no_such_role");
                c
            },
            "(28000); the server admits no such connection: check the user",
            "28000",
        ),
        (
            // A startup option the server refuses (here a pgtenure setting passed as a server one).
            "refused startup option",
            {
                let mut c = base.clone();
                c.options("-c statement_mode=sql");
                c
            },
            "unrecognized configuration parameter \"statement_mode\" (42704); the server refused a \
             setting the connection sends at startup",
            "42704",
        ),
    ];
    for (what, config, says, code) in cases {
        let started = std::time::Instant::now();
        let err = pgtenure::DbBuilder::from_config(config)
            .connection_timeout(Duration::from_secs(10))
            .unwrap()
            .build()
            .unwrap_err();
        let took = started.elapsed();
        println!("{what}: {took:?}: {err}");
        assert!(took < Duration::from_secs(2), "{what} took {took:?}");
        assert_eq!(err.kind(), ErrorKind::Database, "{what}: {err}");
        assert_eq!(err.code().map(|c| c.code()), Some(code), "{what}");
        assert!(err.to_string().contains(says), "{what}: {err}");
    }
    for (url, says) in [
        ("", "the database URL is empty"),
        ("   ", "the database URL is empty"),
        ("mysql://u@h/db", "scheme is \"mysql\""),
        ("postgress://u:secret@h/db", "scheme is \"postgress\""),
        ("127.0.0.1:5432", "does not parse"),
        ("postgres://h/db?sslmode=on", "sslmode \"on\""),
    ] {
        let err = Db::connect(url).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url:?}: {err}");
        assert!(err.to_string().contains(says), "{url:?}: {err}");
        assert!(
            !err.to_string().contains("secret"),
            "a password is never shown: {err}"
        );
    }
}

/// A wrong password is refused by the server at once (28P01), and a missing one by the driver
/// before waiting, on a server of the test's own that asks for passwords.
#[test]
fn a_wrong_or_missing_password_fails_at_once_saying_so() {
    let pg = pgtenure::testing::TempPostgres::builder()
        .hba(
            "local all all trust\n\
             host all postgres 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .start()
        .unwrap();
    postgres::Client::connect(pg.url(), NoTls)
        .unwrap()
        .batch_execute("CREATE ROLE app LOGIN PASSWORD 'right'")
        .unwrap();
    let at = |userinfo: &str| format!("postgres://{userinfo}@127.0.0.1:{}/postgres", pg.port());
    let right = Db::connect(&at("app:right")).unwrap();
    assert_eq!(setting(&right, "application_name"), "pgtenure");

    for (userinfo, says, code) in [
        (
            "app:wrong",
            "password authentication failed for user \"app\" (28P01); the server refused the \
             credentials",
            Some("28P01"),
        ),
        ("app", "password missing", None),
    ] {
        let started = std::time::Instant::now();
        let err = Db::builder(&at(userinfo))
            .unwrap()
            .connection_timeout(Duration::from_secs(10))
            .unwrap()
            .build()
            .unwrap_err();
        let took = started.elapsed();
        println!("{userinfo}: {took:?}: {err}");
        assert!(took < Duration::from_secs(1), "{userinfo} took {took:?}");
        assert_eq!(err.kind(), ErrorKind::Database, "{err}");
        assert_eq!(err.code().map(|c| c.code()), code, "{err}");
        assert!(err.to_string().contains(says), "{err}");
        assert!(
            !err.to_string().contains("wrong"),
            "no password shown: {err}"
        );
    }
}

/// Without the feature `tls`, a mode that needs TLS is refused before connecting, naming the
/// feature; `prefer` (libpq's default) connects without TLS.
#[cfg(not(feature = "tls"))]
#[test]
fn without_the_tls_feature_a_mode_needing_tls_is_refused_naming_it() {
    use pgtenure::SslMode;
    for url in [
        "postgres://u@db.example/app?sslmode=require",
        "host=db.example user=u sslmode=verify-full sslrootcert=/ca.pem",
        "postgresql://u@db.example/app?sslmode=verify-ca",
    ] {
        let err = Db::builder(url).unwrap_err();
        assert!(err.is_invalid_input(), "{url}: {err}");
        assert!(err.to_string().contains("feature \"tls\""), "{url}: {err}");
    }
    let builder = Db::builder("postgres://u@db.example/app").unwrap();
    assert!(builder
        .ssl_mode(SslMode::VerifyFull)
        .unwrap_err()
        .is_invalid_input());
    let mut config: postgres::Config = "host=db.example user=u".parse().unwrap();
    config.ssl_mode(postgres::config::SslMode::Require);
    let err = pgtenure::DbBuilder::from_config(config)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("feature \"tls\""), "{err}");
    // A client certificate is not silently left out.
    let err = Db::builder("postgres://u@db.example/app?sslcert=/c.pem&sslkey=/c.key")
        .and_then(|b| b.build_lazy())
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("sslcert needs TLS"), "{err}");

    let url = format!(
        "{}?sslmode=prefer",
        common::direct_url().split('?').next().unwrap()
    );
    let db = Db::connect(&url).unwrap();
    let ssl: bool = db
        .connection()
        .unwrap()
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(!ssl, "prefer without the feature connects without TLS");
}

/// A server that refuses the WAL functions (as Amazon Aurora does; here the role may not call
/// `pg_current_wal_lsn`) is found out by the connect probe: tokens then do not fold in the timeline,
/// and every primitive still grants. Forced on, a grant fails with the server's refusal.
#[test]
fn a_server_that_refuses_wal_functions_still_grants_with_plain_tokens() {
    let pg = pgtenure::testing::TempPostgres::start().unwrap();
    postgres::Client::connect(pg.url(), NoTls)
        .unwrap()
        .batch_execute(
            "CREATE ROLE app LOGIN;
             GRANT CREATE ON SCHEMA public TO app;
             REVOKE EXECUTE ON FUNCTION pg_current_wal_lsn() FROM PUBLIC",
        )
        .unwrap();
    let url = format!("postgres://app@127.0.0.1:{}/postgres", pg.port());
    let plain = Db::connect(&url).unwrap();
    assert!(!plain.timeline_tokens(), "the probe saw the refusal");
    pgtenure::migrate(&plain).unwrap();
    let lease = pgtenure::leases::Leases::new(&plain)
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .expect("granted");
    assert_eq!(lease.token(), 1);
    let elector = pgtenure::elector::Elector::new(&plain);
    assert!(elector.is_leader().unwrap());
    assert_eq!(elector.term(), Some(1));
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(60);
    let claim = TickClaims::new(&plain)
        .claim("job", tick, Duration::from_secs(1))
        .unwrap()
        .expect("won");
    assert_eq!(claim.token(), 1);

    let forced = Db::connect(&url).unwrap().with_timeline_tokens(true);
    let err = pgtenure::leases::Leases::new(&forced)
        .try_acquire("other", Duration::from_secs(30))
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42501"), "{err}");

    // A server that answers them: on, and tokens on the first timeline are the plain ones.
    assert!(db().timeline_tokens());
}

/// A pool whose server was down for 6 s is usable again soon after the server is back: r2d2 backs
/// off between attempts to reconnect, up to half its connection timeout (5 s with the default
/// 10 s, so a promoted standby or a restarted server went unused for seconds); pgtenure caps that
/// back-off at 500 ms while checkouts still wait the whole timeout.
#[test]
fn a_pool_is_usable_again_soon_after_a_long_outage_ends() {
    let pg = pgtenure::testing::TempPostgres::start().unwrap();
    let db = Db::connect(pg.url()).unwrap();
    let fires = FireClaims::new(&db);
    fires.create_table().unwrap();
    assert!(fires.claim("before@1").unwrap());
    let back_at = thread::scope(|scope| {
        let outage = scope.spawn(|| {
            pg.restart_after(Duration::from_secs(6)).unwrap();
            std::time::Instant::now()
        });
        // Keep asking through the outage, as a renewal thread would.
        let mut n = 0;
        let first_success = loop {
            n += 1;
            if fires.claim(&format!("during@{n}")).is_ok() && outage.is_finished() {
                break std::time::Instant::now();
            }
            // Real time is the subject: a claim every 20 ms, as a renewal thread asks, through
            // the outage; how soon one succeeds after it is what the test measures.
            thread::sleep(Duration::from_millis(20));
        };
        let back_at = outage.join().unwrap();
        first_success.saturating_duration_since(back_at)
    });
    println!("usable again {back_at:?} after the server was back");
    assert!(
        back_at < Duration::from_secs(2),
        "the pool stayed unusable {back_at:?} after the server was back"
    );
}

/// During an outage, an operation that found no connection in time says why the pool could not
/// open one (the server's address refused it), not only that the wait timed out.
#[test]
fn an_operation_during_an_outage_says_why_no_connection_could_be_had() {
    let pg = pgtenure::testing::TempPostgres::start().unwrap();
    let db = Db::builder(pg.url())
        .unwrap()
        .connection_timeout(Duration::from_millis(700))
        .unwrap()
        .build()
        .unwrap();
    let fires = FireClaims::new(&db);
    fires.create_table().unwrap();
    thread::scope(|scope| {
        let outage = scope.spawn(|| pg.restart_after(Duration::from_secs(4)).unwrap());
        let n = std::cell::Cell::new(0);
        let err = wait_for("an operation to fail", Duration::from_secs(10), || {
            n.set(n.get() + 1);
            fires.claim(&format!("during@{}", n.get())).err()
        });
        println!("{err}");
        assert!(err.is_connection(), "{err}");
        assert!(
            err.to_string()
                .contains("the last attempt to connect: error connecting to server: ")
                && err.to_string().to_lowercase().contains("refused"),
            "the cause is told: {err}"
        );
        outage.join().unwrap();
    });
    assert!(fires.claim("after@1").unwrap(), "usable again");
}

/// A statement the server's `statement_timeout` cancels (here the role's, while an operator's
/// transaction holds the table) is a `Timeout`, not a connection error, and says that the server
/// cancelled it and why that happens to pgtenure's short statements, not that pgtenure did.
#[test]
fn a_statement_timeout_is_a_timeout_that_names_the_servers_setting() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "read committed");
    let table = tables.name("fire");
    FireClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    client()
        .batch_execute(&format!(
            "GRANT ALL ON {table} TO {role};
             ALTER ROLE {role} SET statement_timeout = '200ms'",
            role = role.name
        ))
        .unwrap();
    let as_role = pgtenure::DbBuilder::from_config(role.config("timeout_test"))
        .build()
        .unwrap();
    let fires = FireClaims::new(&as_role).with_table(&table).unwrap();
    assert!(fires.claim("first").unwrap(), "the role can claim");
    let mut operator = client();
    let mut tx = operator.transaction().unwrap();
    tx.batch_execute(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
        .unwrap();
    let err = fires.claim("second").unwrap_err();
    tx.rollback().unwrap();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_timeout() && !err.is_connection() && !err.is_permanent());
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("claim fire failed: canceling statement due to statement timeout (57014); the server cancelled the statement: the statement_timeout set for the role, the database or the connection ran out"),
        "{text}"
    );
    assert!(!text.contains("pgtenure cancelled"), "{text}");
    assert!(
        fires.claim("second").unwrap(),
        "nothing was stored, and it can be retried"
    );
}

/// A server that refuses a WAL function while the statement runs (as Aurora does: here a function
/// of that name earlier in the role's search_path raises 0A000) fails the statement, prepared or
/// not, with advice about WAL functions and timeline tokens; nothing about a stale plan.
#[test]
fn a_refused_wal_function_is_reported_as_unsupported_with_the_timeline_advice() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "read committed");
    let schema = tables.name("shim");
    let table = tables.name("lease");
    pgtenure::leases::Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    client()
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE FUNCTION {schema}.pg_current_wal_lsn() RETURNS pg_lsn LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'pg_current_wal_lsn() is not supported here'
                        USING ERRCODE = '0A000'; END $$;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT ALL ON {table}, {table}_promotion TO {role};
             ALTER ROLE {role} SET search_path = {schema}, pg_catalog, public",
            role = role.name
        ))
        .unwrap();
    let _shim = DropSchema(schema.clone());
    for mode in [
        pgtenure::StatementMode::Auto,
        pgtenure::StatementMode::Protocol,
        pgtenure::StatementMode::Sql,
        pgtenure::StatementMode::Unprepared,
    ] {
        let as_role = pgtenure::DbBuilder::from_config(role.config("wal_test"))
            .statement_mode(mode)
            .build()
            .unwrap()
            .with_timeline_tokens(true);
        let err = pgtenure::leases::Leases::new(&as_role)
            .with_table(&table)
            .unwrap()
            .try_acquire("k", Duration::from_secs(30))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Database, "{err}");
        assert_eq!(err.code().map(|c| c.code()), Some("0A000"), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("is not supported here (0A000); the server does not support something the statement uses; if it refuses a WAL function (pg_current_wal_lsn, as Aurora does), turn off timeline-folded tokens"),
            "{mode}: {text}"
        );
    }
}

/// Refusals at connect time that waiting can fix (too many connections for the role, 53300; a
/// database an operator closed to connections for maintenance, 55000) are retried until the
/// connection timeout, and a connect started during them succeeds once they end; a refusal that
/// waiting cannot fix (no CONNECT privilege, 42501) is reported at once with advice that fits it.
#[test]
fn refusals_at_connect_that_waiting_can_fix_are_retried_and_never_reported_as_permanent() {
    let role = format!("pgt_attack_{}", std::process::id());
    let dbname = format!("pgt_attack_db_{}", std::process::id());
    let mut admin = client();
    admin
        .batch_execute(&format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN CONNECTION LIMIT 0"
        ))
        .unwrap();
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {dbname}"))
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {dbname}"))
        .unwrap();
    struct Cleanup(String, String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let mut admin = client();
            let _ = admin.batch_execute(&format!(
                "ALTER DATABASE {db} ALLOW_CONNECTIONS true; DROP DATABASE IF EXISTS {db} WITH (FORCE); \
                 DROP ROLE IF EXISTS {role}",
                db = self.1,
                role = self.0
            ));
        }
    }
    let _cleanup = Cleanup(role.clone(), dbname.clone());
    let base: postgres::Config = common::direct_url().parse().unwrap();
    let as_role = {
        let mut c = base.clone();
        c.user(&role);
        c
    };
    let closed_db = {
        let mut c = base.clone();
        c.dbname(&dbname);
        c
    };
    // Too many connections for the role: retried, then a Connection error.
    let started = std::time::Instant::now();
    let err = pgtenure::DbBuilder::from_config(as_role.clone())
        .connection_timeout(Duration::from_millis(1500))
        .unwrap()
        .build()
        .unwrap_err();
    println!("53300: {:?}: {err}", started.elapsed());
    assert_eq!(err.kind(), ErrorKind::Connection, "53300: {err}");
    assert!(!err.is_permanent(), "53300: {err}");
    // An operator closes the database for maintenance, and opens it again while a connect waits.
    admin
        .batch_execute(&format!("ALTER DATABASE {dbname} ALLOW_CONNECTIONS false"))
        .unwrap();
    let reopen = {
        let dbname = dbname.clone();
        std::thread::spawn(move || {
            // Real time is the subject: the database stays closed for a while.
            std::thread::sleep(Duration::from_millis(700));
            client()
                .batch_execute(&format!("ALTER DATABASE {dbname} ALLOW_CONNECTIONS true"))
                .unwrap();
        })
    };
    let started = std::time::Instant::now();
    let connected = pgtenure::DbBuilder::from_config(closed_db)
        .connection_timeout(Duration::from_secs(10))
        .unwrap()
        .build();
    reopen.join().unwrap();
    println!(
        "55000: {:?}: {:?}",
        started.elapsed(),
        connected.as_ref().err()
    );
    assert!(
        connected.is_ok(),
        "a database closed for maintenance was reported at once: {}",
        connected.err().unwrap()
    );
    // Allowed, but without the CONNECT privilege: at once, and not as a startup setting.
    admin
        .batch_execute(&format!(
            "ALTER ROLE {role} CONNECTION LIMIT -1; REVOKE CONNECT ON DATABASE {dbname} FROM PUBLIC"
        ))
        .unwrap();
    let mut no_connect = as_role;
    no_connect.dbname(&dbname);
    let started = std::time::Instant::now();
    let err = pgtenure::DbBuilder::from_config(no_connect)
        .connection_timeout(Duration::from_secs(10))
        .unwrap()
        .build()
        .unwrap_err();
    let took = started.elapsed();
    println!("42501: {took:?}: {err}");
    assert!(took < Duration::from_secs(2), "42501 took {took:?}");
    assert_eq!(err.kind(), ErrorKind::Database, "42501: {err}");
    assert!(
        !err.to_string()
            .contains("a setting the connection sends at startup"),
        "a missing CONNECT privilege is not a startup setting: {err}"
    );
}

/// The sessions of `application` whose last statement began as `statement`'s text does (idle
/// pool connections keep it in `pg_stat_activity`).
fn sessions_last_on(application: &str, statement: &str) -> Vec<i32> {
    let start: String =
        std::fs::read_to_string(format!("{}/sql/{statement}", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .chars()
            .take(60)
            .collect();
    client()
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 \
             AND left(query, 60) = $2",
            &[&application, &start],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// A connection that served one of pgtenure's statements is parked for the thread that used it:
/// the next statement of that thread takes it again, and a statement of another thread meanwhile
/// takes another (r2d2 alone would hand the other thread the one returned last, so one session
/// would have run all three).
#[test]
fn a_thread_gets_back_the_connection_it_used_last_not_the_one_another_thread_returned() {
    let mut tables = Tables::new();
    let (ours, theirs) = (tables.name("park_ours"), tables.name("park_theirs"));
    let application = format!("pgtenure_park_{}", std::process::id());
    let db = Db::builder(&common::with_param(
        &common::url(),
        "application_name",
        &application,
    ))
    .unwrap()
    .max_size(4)
    .unwrap()
    .thread_affinity(true)
    .build()
    .unwrap();
    let ticks = TickClaims::new(&db).with_table(&ours).unwrap();
    let fires = FireClaims::new(&db).with_table(&theirs).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let ttl = Duration::from_secs(60);
    let (tick_sql, fire_sql) = ("tick_claims/claim.sql", "fire_claims/claim.sql");
    assert!(ticks.claim("job", tick, ttl).unwrap().is_some());
    let first = sessions_last_on(&application, tick_sql);
    thread::scope(|s| {
        s.spawn(|| assert!(fires.claim("key").unwrap()))
            .join()
            .unwrap()
    });
    assert!(ticks.claim("job", tick, ttl).unwrap().is_none());
    let (mine, other) = (
        sessions_last_on(&application, tick_sql),
        sessions_last_on(&application, fire_sql),
    );
    assert_eq!(first.len(), 1, "one session ran the first claim: {first:?}");
    assert_eq!(
        mine, first,
        "the thread's second claim ran on its first claim's session"
    );
    assert_eq!(
        other.len(),
        1,
        "the other thread's statement is still the last of the session it ran on, which the \
         first thread did not take: {other:?}"
    );
    assert_ne!(mine, other);
}

/// A thread that waits for a connection is not left waiting while one is parked: a connection
/// parked while the thread waits goes back to the pool, which hands it over (a parked connection
/// is invisible to r2d2's waiters).
#[test]
fn a_thread_waiting_for_a_connection_gets_one_parked_while_it_waits() {
    let mut tables = Tables::new();
    let name = tables.name("park_wait");
    let db = Db::builder(&common::url())
        .unwrap()
        .max_size(2)
        .unwrap()
        .connection_timeout(Duration::from_secs(60))
        .unwrap()
        .thread_affinity(true)
        .build()
        .unwrap();
    let fires = FireClaims::new(&db).with_table(&name).unwrap();
    fires.create_table().unwrap();
    // The pool's second connection, held by the test until the end.
    let held = db.connection().unwrap();
    // An outside session blocks the table, so the first claim holds the pool's other connection.
    let mut blocker = client();
    let mut lock = blocker.transaction().unwrap();
    lock.batch_execute(&format!("LOCK TABLE \"{name}\" IN ACCESS EXCLUSIVE MODE"))
        .unwrap();
    let (first_done, done) = crossbeam_channel::unbounded();
    let second_done = first_done.clone();
    let fires = &fires;
    thread::scope(|s| {
        s.spawn(move || first_done.send(("blocked", fires.claim("first"))).unwrap());
        wait_for(
            "the first claim to wait on the lock",
            Duration::from_secs(10),
            || (waiting_on_lock_of(&name) > 0).then_some(()),
        );
        s.spawn(move || {
            second_done
                .send(("waiting", fires.claim("second")))
                .unwrap()
        });
        wait_for("the second claim to wait", Duration::from_secs(10), || {
            (waiting_checkouts(&db) == 1).then_some(())
        });
        lock.commit().unwrap();
        let mut finished = Vec::new();
        for _ in 0..2 {
            let (which, claimed) =
                done.recv_timeout(Duration::from_secs(20))
                    .unwrap_or_else(|_| {
                        panic!("a claim still waits for a connection (finished: {finished:?})")
                    });
            assert!(claimed.unwrap(), "{which}");
            finished.push(which);
        }
    });
    drop(held);
}

/// A pool that keeps no idle connection (`build_lazy`) has room again when a checked-out connection
/// breaks and goes back (r2d2 discards it): a claim waiting then gets a new connection, where it
/// waited out its whole timeout before (r2d2 opens connections for a checkout only when it begins
/// to wait, and opened none when the broken one was discarded).
#[test]
fn a_checkout_waiting_in_a_lazy_pool_gets_a_connection_when_a_held_one_breaks() {
    let mut tables = Tables::new();
    let name = tables.name("lazy_wait");
    let db = lazy_pool(1, Duration::from_secs(5));
    let fires = FireClaims::new(&db).with_table(&name).unwrap();
    fires.create_table().unwrap();
    // The pool's only connection, held by the test: its session is ended below.
    let mut held = db.connection().unwrap();
    let pid = backend_pid(&mut held);
    let fires = &fires;
    thread::scope(|s| {
        let waiter = s.spawn(move || fires.claim("waiting"));
        wait_for("the claim to wait", Duration::from_secs(10), || {
            (waiting_checkouts(&db) == 1).then_some(())
        });
        end_session(&mut held, pid);
        drop(held);
        let claimed = waiter.join().unwrap();
        assert!(
            claimed.as_ref().is_ok_and(|won| *won),
            "the waiting claim: {claimed:?}"
        );
    });
}

/// Several checkouts waiting and several held connections breaking at once, in lazy pools of 1, 2
/// and 4: the pool's connections are held, those it lends by the test, the rest by claims blocked
/// on a table lock; more claims than the pool's size wait in the pool; the lent ones are broken
/// and dropped: as many waiters get a connection (and block on the lock in turn).
#[test]
fn waiting_checkouts_get_as_many_connections_as_broke_in_lazy_pools_of_one_two_and_four() {
    let mut tables = Tables::new();
    let name = tables.name("lazy_many");
    for size in [1_u32, 2, 4] {
        let db = lazy_pool(size, Duration::from_secs(20));
        let fires = FireClaims::new(&db).with_table(&name).unwrap();
        fires.create_table().unwrap();
        let lent = size.saturating_sub(1).max(1) as usize;
        let mut held: Vec<_> = (0..lent).map(|_| db.connection().unwrap()).collect();
        let pids: Vec<i32> = held.iter_mut().map(backend_pid).collect();
        let mut locker = client();
        let mut lock = locker.transaction().unwrap();
        lock.batch_execute(&format!("LOCK TABLE \"{name}\" IN ACCESS EXCLUSIVE MODE"))
            .unwrap();
        let (blocked, waiters) = (size as usize - lent, size as usize + 2);
        let (fires, db) = (&fires, &db);
        thread::scope(|s| {
            let claims: Vec<_> = (0..blocked + waiters)
                .map(|k| s.spawn(move || fires.claim(&format!("{size}-{k}"))))
                .collect();
            wait_for(
                "the claims to block or wait",
                Duration::from_secs(10),
                || {
                    let on_lock = waiting_on_lock_of(&name) == blocked as i64;
                    (on_lock && waiting_checkouts(db) == waiters).then_some(())
                },
            );
            for (conn, pid) in held.iter_mut().zip(&pids) {
                end_session(conn, *pid);
            }
            held.clear();
            // Well within the checkouts' 20 s: r2d2 alone would wake none of them before it.
            wait_for(
                "as many waiting checkouts as connections broke to get one",
                Duration::from_secs(10),
                || (waiting_checkouts(db) == waiters - lent).then_some(()),
            );
            lock.commit().unwrap();
            for claim in claims {
                let claimed = claim.join().unwrap();
                assert!(claimed.is_ok(), "pool of {size}: {claimed:?}");
            }
        });
    }
}

/// A pool that keeps no idle connection (`build_lazy`), of `size`, whose checkouts wait up to
/// `wait`.
fn lazy_pool(size: u32, wait: Duration) -> Db {
    Db::builder(&common::url())
        .unwrap()
        .max_size(size)
        .unwrap()
        .connection_timeout(wait)
        .unwrap()
        .build_lazy()
        .unwrap()
}

/// The server process of a lent connection's session.
fn backend_pid(conn: &mut pgtenure::Connection) -> i32 {
    conn.query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0)
}

/// Ends the session `pid` of `conn` on the server, and waits until `conn` knows it is closed.
fn end_session(conn: &mut pgtenure::Connection, pid: i32) {
    client()
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    wait_for("the connection to close", Duration::from_secs(10), || {
        let _ = conn.simple_query("SELECT 1");
        conn.is_closed().then_some(())
    });
}

/// How many sessions wait on a lock for a statement naming `table`.
fn waiting_on_lock_of(table: &str) -> i64 {
    client()
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%' || $1 || '%'",
            &[&table],
        )
        .unwrap()
        .get(0)
}

/// A pool of the application's own ([`Db::from_pool`]) is also the application's, and maybe other
/// `Db`s': pgtenure parks none of its connections there, or the application's own checkouts (and
/// another `Db`'s renewals, whose waits this `Db` cannot see) would wait for connections that
/// only sit parked.
#[test]
fn a_pool_of_the_applications_own_gets_its_connections_back_after_each_statement() {
    let mut tables = Tables::new();
    let name = tables.name("park_own_pool");
    let pool = pgtenure::r2d2::Pool::builder()
        .max_size(1)
        .test_on_check_out(false)
        .connection_timeout(Duration::from_secs(2))
        .build(pgtenure::r2d2_postgres::PostgresConnectionManager::new(
            common::url_config(),
            NoTls,
        ))
        .unwrap();
    let db = Db::from_pool(pool.clone());
    let fires = FireClaims::new(&db).with_table(&name).unwrap();
    fires.create_table().unwrap();
    assert!(fires.claim("key").unwrap());
    // r2d2's own count, which no parking drains.
    let state = pool.state();
    assert_eq!(
        (state.connections, state.idle_connections),
        (1, 1),
        "the pool's only connection is back in it"
    );
    let other = FireClaims::new(&Db::from_pool(pool.clone()))
        .with_table(&name)
        .unwrap();
    thread::scope(|s| {
        s.spawn(|| assert!(other.claim("other").unwrap()))
            .join()
            .unwrap()
    });
    assert!(pool.get_timeout(Duration::from_millis(500)).is_ok());
}

/// Many threads on a pool of one and of two, each checkout allowed little time: a thread that
/// begins to wait just as another parks is never left waiting for the parked connection (the
/// waiter count and the parking's fences), so no checkout times out.
#[test]
fn many_threads_on_a_pool_of_one_or_two_never_wait_for_a_parked_connection() {
    let mut tables = Tables::new();
    let name = tables.name("park_stress");
    for max_size in [1, 2] {
        let db = Db::builder(&common::url())
            .unwrap()
            .max_size(max_size)
            .unwrap()
            .connection_timeout(Duration::from_secs(5))
            .unwrap()
            .thread_affinity(true)
            .build()
            .unwrap();
        let fires = FireClaims::new(&db).with_table(&name).unwrap();
        fires.create_table().unwrap();
        let threads = 12;
        let start = Barrier::new(threads);
        thread::scope(|s| {
            for t in 0..threads {
                let (fires, start) = (&fires, &start);
                s.spawn(move || {
                    start.wait();
                    for i in 0..40 {
                        let key = format!("{max_size}-{t}-{i}");
                        fires.claim(&key).unwrap_or_else(|e| panic!("{key}: {e}"));
                    }
                });
            }
        });
        let state = db.pool_state();
        assert!(state.connections <= max_size, "{state:?}");
    }
}

/// A pool of `max_size` 4 that keeps each thread's connection, and a table for fire claims made
/// through it (created through another `Db`, so that the test's own thread parks nothing).
fn parking_db(tables: &mut Tables, name: &str) -> (Db, FireClaims) {
    let table = tables.name(name);
    let setup = Db::builder(&common::url())
        .unwrap()
        .thread_affinity(false)
        .build()
        .unwrap();
    FireClaims::new(&setup)
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    let db = parking_pool();
    let fires = FireClaims::new(&db).with_table(&table).unwrap();
    (db, fires)
}

/// A pool of `max_size` 4 that keeps each thread's connection.
fn parking_pool() -> Db {
    Db::builder(&common::url())
        .unwrap()
        .max_size(4)
        .unwrap()
        .thread_affinity(true)
        .build()
        .unwrap()
}

/// A thread that ends gives back to the pool the connection it left parked: no thread would take
/// it as its own any more, and, parked, r2d2 would never close it for its idle time or age (with
/// a thread per request, the pool would keep a connection for each recent thread).
#[test]
fn a_thread_that_ends_gives_the_connection_it_parked_back_to_the_pool() {
    let mut tables = Tables::new();
    let (db, fires) = parking_db(&mut tables, "park_exit");
    // The build's own probe parked its connection for this thread: reading the pool's state
    // gives it back.
    db.pool_state();
    assert_eq!(parked_connections(&db), 0);
    thread::scope(|s| {
        s.spawn(|| {
            assert!(fires.claim("key").unwrap());
            assert_eq!(
                parked_connections(&db),
                1,
                "the claim's connection is parked for its thread"
            );
        })
        .join()
        .unwrap()
    });
    // The pool's worker threads give it back, at once, not at a sweep (a second later).
    wait_for(
        "the ended thread's parked connection to go back to the pool",
        Duration::from_millis(900),
        || (parked_connections(&db) == 0).then_some(()),
    );
    // The pool still serves this thread.
    assert!(!fires.claim("key").unwrap());
}

/// A thread that parks in two pools by turns, one of them dropped and built again and again (a
/// parking of the same size may then be allocated where a dropped one was), still gives back
/// every connection it left parked when it ends: each parking it used is remembered for its exit,
/// also one remembered again after another.
#[test]
fn a_thread_using_several_pools_by_turns_gives_back_what_it_parked_in_each_when_it_ends() {
    let mut tables = Tables::new();
    let (kept_db, kept) = parking_db(&mut tables, "park_turns");
    let table = tables.name("park_turns_rebuilt");
    FireClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    kept_db.pool_state();
    let last = thread::scope(|s| {
        s.spawn(|| {
            let mut last = None;
            for round in 0..20 {
                let db = parking_pool();
                let fires = FireClaims::new(&db).with_table(&table).unwrap();
                for n in 0..3 {
                    let key = format!("{round}@{n}");
                    fires.claim(&key).unwrap();
                    assert_eq!(parked_connections(&db), 1, "round {round}");
                    kept.claim(&key).unwrap();
                    assert_eq!(parked_connections(&kept_db), 1, "round {round}");
                }
                // The last one outlives the thread; the others are dropped with a connection
                // parked for it.
                last = Some(db);
            }
            last.unwrap()
        })
        .join()
        .unwrap()
    });
    wait_for(
        "the ended thread's parked connections to go back to their pools",
        Duration::from_millis(900),
        || (parked_connections(&kept_db) == 0 && parked_connections(&last) == 0).then_some(()),
    );
}

/// A connection that lies parked unused, its thread alive but idle (a renewal thread between
/// renewals), goes back to the pool after at most two sweeps, one a second.
#[test]
fn a_connection_parked_unused_goes_back_to_the_pool_within_two_sweeps() {
    let mut tables = Tables::new();
    let (db, fires) = parking_db(&mut tables, "park_sweep");
    db.pool_state();
    let parked = Barrier::new(2);
    let (end, ended) = std::sync::mpsc::channel::<()>();
    thread::scope(|s| {
        s.spawn(|| {
            let ended = ended;
            assert!(fires.claim("key").unwrap());
            parked.wait();
            // Alive, holding nothing, until the test is done (its sender dropped, also when it
            // fails).
            let _ = ended.recv();
        });
        parked.wait();
        // Real time is the subject: the sweep runs every second on the pool's worker threads.
        wait_for(
            "the idle thread's parked connection to go back to the pool",
            Duration::from_secs(10),
            || (parked_connections(&db) == 0).then_some(()),
        );
        drop(end);
    });
}

/// The sessions of `application` in `pg_stat_activity`.
fn sessions_of(application: &str) -> i64 {
    client()
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )
        .unwrap()
        .get(0)
}

/// Waits until every connection of `db`'s pool lies idle in it (none parked) and none is being
/// opened (its session would show before the pool counts it), so that nothing else holds the pool
/// (a worker thread opening a connection holds it until the connection is in).
fn wait_until_settled(db: &Db, application: &str) {
    wait_for("the pool to settle", Duration::from_secs(10), || {
        let state = db.pool_state();
        (state.connections == state.idle_connections
            && i64::from(state.connections) == sessions_of(application))
        .then_some(())
    });
}

thread_local! {
    /// A `Db` and a handle of it kept by one thread, dropped with the thread's other
    /// thread-locals when it ends.
    static KEPT: std::cell::RefCell<Option<(Db, FireClaims)>> = const { std::cell::RefCell::new(None) };
}

/// A `Db` whose last clone lives in a thread-local is dropped by the thread-local's destructor,
/// after the driver's runtime context is gone: closing its connections there would panic in the
/// driver and abort the process. With parking on or off, and for a pool of the application's own,
/// the thread ends and the pool's connections close (elsewhere).
#[test]
fn a_db_dropped_by_a_thread_local_destructor_closes_its_connections_without_aborting() {
    for (mode, affinity) in [("parking", true), ("direct", false), ("own", false)] {
        let mut tables = Tables::new();
        let table = tables.name("park_tls_drop");
        FireClaims::new(&db())
            .with_table(&table)
            .unwrap()
            .create_table()
            .unwrap();
        let application = format!("pgtenure_tls_drop_{}_{mode}", std::process::id());
        let url = common::with_param(&common::url(), "application_name", &application);
        let mut config = common::url_config();
        config.application_name(&application);
        let app = application.clone();
        thread::spawn(move || {
            // First: its destructor then runs after the driver's (they run in reverse order).
            KEPT.with(|_| ());
            let db = if mode == "own" {
                let pool = pgtenure::r2d2::Pool::builder()
                    .max_size(2)
                    .test_on_check_out(false)
                    .build(pgtenure::r2d2_postgres::PostgresConnectionManager::new(
                        config, NoTls,
                    ))
                    .unwrap();
                Db::from_pool(pool)
            } else {
                Db::builder(&url)
                    .unwrap()
                    .thread_affinity(affinity)
                    .build()
                    .unwrap()
            };
            let fires = FireClaims::new(&db).with_table(&table).unwrap();
            KEPT.with(|kept| *kept.borrow_mut() = Some((db, fires)));
            KEPT.with(|kept| {
                let kept = kept.borrow();
                let (_, fires) = kept.as_ref().unwrap();
                assert!(fires.claim("key").unwrap());
            });
            // The thread-local holds the pool's last reference.
            KEPT.with(|kept| {
                let kept = kept.borrow();
                let (db, _) = kept.as_ref().unwrap();
                wait_until_settled(db, &app);
            });
        })
        .join()
        .unwrap();
        wait_for(
            "the dropped Db's sessions to end",
            Duration::from_secs(10),
            || (sessions_of(&application) == 0).then_some(()),
        );
    }
}

/// A `Db` dropped inside an async runtime (the state of an async application, dropped in a task
/// or at the end of `main`) closes its connections on another thread: the driver's blocking close
/// would start a runtime within a runtime, which panics.
#[test]
fn a_db_dropped_inside_an_async_runtime_closes_its_connections_without_panicking() {
    for (mode, affinity) in [("parking", true), ("direct", false)] {
        let application = format!("pgtenure_async_drop_{}_{mode}", std::process::id());
        let url = common::with_param(&common::url(), "application_name", &application);
        let db = Db::builder(&url)
            .unwrap()
            .thread_affinity(affinity)
            .build()
            .unwrap();
        // The drop below holds the pool's last reference.
        wait_until_settled(&db, &application);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async move { drop(db) });
        wait_for(
            "the dropped Db's sessions to end",
            Duration::from_secs(10),
            || (sessions_of(&application) == 0).then_some(()),
        );
    }
}
