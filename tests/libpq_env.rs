//! `Db::from_env` and `Db::connect` read libpq's environment as psql does: the `PG*` variables,
//! the password file with its permission rule, a service file; what the URL says wins.
//!
//! One test in this binary: it sets the process's environment, which no other thread reads then.

use std::path::Path;

use pgtenure::postgres::{Client, NoTls};
use pgtenure::testing::TempPostgres;
use pgtenure::{Db, DbBuilder, ErrorKind};

fn write_mode(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn one(db: &Db, sql: &str) -> String {
    db.connection()
        .unwrap()
        .query_one(sql, &[])
        .unwrap()
        .try_get(0)
        .unwrap()
}

#[test]
fn the_library_connects_from_libpqs_environment() {
    let _ = env_logger::builder().is_test(true).try_init();
    // A server that asks `app` for a password.
    let pg = TempPostgres::builder()
        .hba(
            "local all all trust\n\
             host all postgres 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .start()
        .unwrap();
    Client::connect(pg.url(), NoTls)
        .unwrap()
        .batch_execute("CREATE ROLE app LOGIN PASSWORD 'pass:word'")
        .unwrap();
    let home = pg.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for name in [
        "PGSERVICE",
        "PGSERVICEFILE",
        "PGPASSWORD",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
        "PGOPTIONS",
    ] {
        std::env::remove_var(name);
    }
    std::env::set_var("HOME", &home);
    std::env::set_var("PGHOST", "127.0.0.1");
    std::env::set_var("PGPORT", pg.port().to_string());
    std::env::set_var("PGUSER", "app");
    std::env::set_var("PGDATABASE", "postgres");
    std::env::set_var("PGAPPNAME", "from-pgappname");
    std::env::set_var("PGCONNECT_TIMEOUT", "3");

    // The password from ~/.pgpass (0600), a colon escaped.
    let pgpass = home.join(".pgpass");
    write_mode(&pgpass, "127.0.0.1:*:*:app:pass\\:word\n", 0o600);
    let db = Db::from_env().unwrap();
    assert_eq!(one(&db, "SELECT current_user::text"), "app");
    assert_eq!(
        one(&db, "SELECT current_setting('application_name')"),
        "from-pgappname"
    );
    // A fallback name yields to PGAPPNAME.
    let named = DbBuilder::from_env()
        .and_then(|b| b.fallback_application_name("tool"))
        .and_then(|b| b.build())
        .unwrap();
    assert_eq!(
        one(&named, "SELECT current_setting('application_name')"),
        "from-pgappname"
    );

    // A URL's values win; what it leaves unset (the password) still comes from the environment.
    let by_url = Db::connect(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres",
        pg.port()
    ))
    .unwrap();
    assert_eq!(one(&by_url, "SELECT current_user::text"), "postgres");
    let partial = Db::connect("postgres://127.0.0.1/postgres?application_name=url-wins").unwrap();
    assert_eq!(one(&partial, "SELECT current_user::text"), "app");
    assert_eq!(
        one(&partial, "SELECT current_setting('application_name')"),
        "url-wins"
    );

    // Readable by others: ignored (with a warning), so the password is missing.
    write_mode(&pgpass, "127.0.0.1:*:*:app:pass\\:word\n", 0o644);
    let err = Db::from_env().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
    assert!(
        err.to_string().contains("password missing") && err.to_string().contains(".pgpass"),
        "{err}"
    );

    // PGPASSWORD, and a service file (PGSERVICEFILE) whose values beat the variables.
    std::env::set_var("PGPASSWORD", "pass:word");
    std::env::set_var("PGDATABASE", "no_such_database");
    let services = home.join("services.conf");
    std::fs::write(
        &services,
        format!(
            "[coordination]\nhost=127.0.0.1\nport={}\ndbname=postgres\n",
            pg.port()
        ),
    )
    .unwrap();
    std::env::set_var("PGSERVICEFILE", &services);
    std::env::set_var("PGSERVICE", "coordination");
    let db = Db::from_env().unwrap();
    assert_eq!(one(&db, "SELECT current_database()::text"), "postgres");
    std::env::set_var("PGSERVICE", "missing");
    let err = Db::from_env().unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("service \"missing\""), "{err}");
}
