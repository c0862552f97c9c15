//! The built `pgtenure` binary configured the way psql is: libpq's environment variables, the
//! password file, service files, TLS with a CA-signed or self-signed server certificate and with a
//! client certificate; and the table flags, accepted by every subcommand and read from
//! `PGTENURE_*_TABLE`.

mod common;
#[cfg(feature = "tls")]
#[allow(dead_code)]
#[path = "../../tests/common/tls.rs"]
mod tls;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{db, unique, url};
use pgtenure::leases::Leases;
use pgtenure::postgres::config::Host;
use pgtenure::testing::TempPostgres;

/// Every variable the command reads about its database, so that a test sets exactly its own.
const LIBPQ_VARIABLES: &[&str] = &[
    "DATABASE_URL",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGPASSWORD",
    "PGDATABASE",
    "PGSERVICE",
    "PGSERVICEFILE",
    "PGSYSCONFDIR",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGAPPNAME",
    "PGCONNECT_TIMEOUT",
    "PGOPTIONS",
    "PGTARGETSESSIONATTRS",
    "PGTENURE_LEASES_TABLE",
    "PGTENURE_LEADER_TABLE",
    "PGTENURE_TICKS_TABLE",
    "PGTENURE_PROCESSES_TABLE",
    "PGTENURE_UNITS_TABLE",
];

/// The binary with `vars` as its only database settings (no `--url`), and a HOME of its own.
fn pgtenure(home: &Path, vars: &[(&str, String)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pgtenure"));
    for name in LIBPQ_VARIABLES {
        command.env_remove(name);
    }
    command.env("HOME", home);
    for (name, value) in vars {
        command.env(name, value);
    }
    command.args(args).stdin(Stdio::null()).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch directory (removed on drop).
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(unique("libpq"));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The test database's host, port, user and database, as PG* variables.
fn test_database_variables() -> Vec<(&'static str, String)> {
    let config: pgtenure::postgres::Config = url().parse().unwrap();
    let host = match &config.get_hosts()[0] {
        Host::Tcp(host) => host.clone(),
        Host::Unix(path) => path.display().to_string(),
    };
    vec![
        ("PGHOST", host),
        (
            "PGPORT",
            config
                .get_ports()
                .first()
                .copied()
                .unwrap_or(5432)
                .to_string(),
        ),
        ("PGUSER", config.get_user().unwrap().to_owned()),
        ("PGDATABASE", config.get_dbname().unwrap().to_owned()),
    ]
}

/// A lease table of the test database with one lease held in it, dropped with it.
struct HeldLease {
    table: String,
    _lease: pgtenure::leases::Lease,
}

impl HeldLease {
    fn new() -> HeldLease {
        let table = unique("lease");
        let leases = Leases::new(&db()).with_table(&table).unwrap();
        leases.create_table().unwrap();
        let lease = leases
            .acquire("held-by-library", std::time::Duration::from_secs(60))
            .unwrap()
            .expect("a free key");
        HeldLease {
            table,
            _lease: lease,
        }
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        if let Ok(mut c) = db().connection() {
            let _ = c.batch_execute(&format!(
                "DROP TABLE IF EXISTS {l}, {l}_promotion CASCADE; DROP SEQUENCE IF EXISTS {l}_token_seq",
                l = self.table
            ));
        }
    }
}

/// Regression (issue 34): the command answered "no database given" unless given --url or
/// DATABASE_URL, and the table flags only through arguments.
#[test]
fn the_command_needs_no_url_when_libpq_variables_name_the_database() {
    let home = Scratch::new();
    let held = HeldLease::new();
    let mut vars = test_database_variables();
    vars.push(("PGTENURE_LEASES_TABLE", held.table.clone()));
    let out = pgtenure(&home.0, &vars, &["leases", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("held-by-library"),
        "{}",
        text(&out.stdout)
    );

    // Nothing named: still a usage error, saying what to set.
    let out = pgtenure(&home.0, &[], &["leases"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("PGHOST"),
        "{}",
        text(&out.stderr)
    );

    // A URL's values win over the variables: a wrong PGDATABASE under a right URL is not used.
    let mut wrong = vec![("PGDATABASE", "no_such_database".to_owned())];
    wrong.push(("PGTENURE_LEASES_TABLE", held.table.clone()));
    let out = pgtenure(&home.0, &wrong, &["--url", &url(), "leases", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // ...and fill what it leaves unset: a URL without a database takes PGDATABASE.
    let out = pgtenure(
        &home.0,
        &wrong,
        &[
            "--url",
            url().split('?').next().unwrap().rsplit_once('/').unwrap().0,
            "leases",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no_such_database"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_service_file_names_the_database() {
    let home = Scratch::new();
    let held = HeldLease::new();
    let vars = test_database_variables();
    let mut service = String::from("# pgtenure's test\n[coordination]\n");
    for (name, value) in &vars {
        let key = match *name {
            "PGHOST" => "host",
            "PGPORT" => "port",
            "PGUSER" => "user",
            _ => "dbname",
        };
        service.push_str(&format!("{key}={value}\n"));
    }
    let file = home.0.join("services.conf");
    std::fs::write(&file, service).unwrap();
    let out = pgtenure(
        &home.0,
        &[
            ("PGSERVICEFILE", file.display().to_string()),
            ("PGSERVICE", "coordination".to_owned()),
            ("PGTENURE_LEASES_TABLE", held.table.clone()),
        ],
        &["leases", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("held-by-library"));
    // ~/.pg_service.conf is the default file, and `service=` in a connection string names one.
    std::fs::copy(&file, home.0.join(".pg_service.conf")).unwrap();
    let out = pgtenure(
        &home.0,
        &[("PGTENURE_LEASES_TABLE", held.table.clone())],
        &["--url", "service=coordination", "leases", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("held-by-library"));
}

/// Regression (issue 34): the table flags were refused by lease-run ("--leader-table is for
/// listings; lease-run prints none"), so one alias could not serve every subcommand.
#[test]
fn every_subcommand_accepts_every_table_flag_and_its_variable() {
    let home = Scratch::new();
    let held = HeldLease::new();
    let mut vars = test_database_variables();
    vars.push(("PGTENURE_LEASES_TABLE", held.table.clone()));
    for (name, flag) in [
        ("PGTENURE_LEADER_TABLE", "--leader-table"),
        ("PGTENURE_TICKS_TABLE", "--ticks-table"),
        ("PGTENURE_PROCESSES_TABLE", "--processes-table"),
        ("PGTENURE_UNITS_TABLE", "--units-table"),
    ] {
        let other = unique("unused");
        let out = pgtenure(
            &home.0,
            &vars,
            &["lease-run", "other-key", flag, &other, "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", text(&out.stderr));
        let mut with_variable = vars.clone();
        with_variable.push((name, other));
        let out = pgtenure(
            &home.0,
            &with_variable,
            &["lease-run", "other-key", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{name}: {}", text(&out.stderr));
    }
    // A bad name in a variable is the same usage error as in a flag, whatever the subcommand.
    let mut bad = vars.clone();
    bad.push(("PGTENURE_UNITS_TABLE", "1units".to_owned()));
    let out = pgtenure(&home.0, &bad, &["lease-run", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A throwaway server that asks `app` for its password (scram-sha-256) and trusts `postgres`.
fn password_server() -> TempPostgres {
    let pg = TempPostgres::builder()
        .hba(
            "local all all trust\n\
             host all postgres 127.0.0.1/32 trust\n\
             host all all 127.0.0.1/32 scram-sha-256\n",
        )
        .start()
        .unwrap();
    let mut admin =
        pgtenure::postgres::Client::connect(pg.url(), pgtenure::postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE ROLE app LOGIN PASSWORD 'from:the\\file'; GRANT CREATE ON SCHEMA public TO app",
        )
        .unwrap();
    pg
}

/// Regression (issue 34): the command answered "password missing ... put it in the URL".
#[test]
fn the_password_file_is_read_unless_others_can_read_it() {
    let pg = password_server();
    let home = Scratch::new();
    let vars = vec![
        ("PGHOST", "127.0.0.1".to_owned()),
        ("PGPORT", pg.port().to_string()),
        ("PGUSER", "app".to_owned()),
        ("PGDATABASE", "postgres".to_owned()),
    ];
    // ~/.pgpass, with an escaped colon and backslash in the password and a wildcard port.
    let pgpass = home.0.join(".pgpass");
    let line = "127.0.0.1:*:postgres:app:from\\:the\\\\file\n";
    tls_free_write_mode(
        &pgpass,
        &format!("# test\nother:*:*:*:wrong\n{line}"),
        0o600,
    );
    let out = pgtenure(&home.0, &vars, &["lease-run", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Readable by others: ignored, and the command says so.
    tls_free_write_mode(&pgpass, line, 0o644);
    let out = pgtenure(&home.0, &vars, &["lease-run", "k", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pgtenure: warning: password file")
            && stderr.contains("group or world access")
            && stderr.contains("chmod 600"),
        "{stderr}"
    );
    assert!(stderr.contains("~/.pgpass"), "{stderr}");
    assert_eq!(stderr.matches("pgtenure: warning").count(), 1, "{stderr}");

    // PGPASSFILE names another file.
    let elsewhere = home.0.join("passwords");
    tls_free_write_mode(&elsewhere, line, 0o600);
    let mut named = vars.clone();
    named.push(("PGPASSFILE", elsewhere.display().to_string()));
    let out = pgtenure(&home.0, &named, &["lease-run", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A password in the environment wins over the file.
    named.push(("PGPASSWORD", "wrong".to_owned()));
    let out = pgtenure(&home.0, &named, &["lease-run", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("28P01"), "{}", text(&out.stderr));
}

fn tls_free_write_mode(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[cfg(feature = "tls")]
mod over_tls {
    use super::tls::{self_signed, server, server_with, write_mode, Authority};
    use super::*;

    fn tls_vars(pg: &TempPostgres, mode: &str, root: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("PGHOST", "localhost".to_owned()),
            ("PGPORT", pg.port().to_string()),
            ("PGUSER", "postgres".to_owned()),
            ("PGDATABASE", "postgres".to_owned()),
            ("PGSSLMODE", mode.to_owned()),
            ("PGSSLROOTCERT", root.display().to_string()),
        ]
    }

    #[test]
    fn a_ca_signed_server_certificate_is_verified_through_the_variables() {
        let ca = Authority::new("pgtenure cli CA");
        let pg = server(&ca);
        let home = Scratch::new();
        let root = ca.write(&home.0, "ca.crt");
        let out = pgtenure(
            &home.0,
            &tls_vars(&pg, "verify-full", &root),
            &["lease-run", "k", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let other = Authority::new("other").write(&home.0, "other.crt");
        let out = pgtenure(
            &home.0,
            &tls_vars(&pg, "verify-full", &other),
            &["lease-run", "k", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("UnknownIssuer"),
            "{}",
            text(&out.stderr)
        );
        // libpq's rule: require with ~/.postgresql/root.crt present verifies as verify-ca.
        std::fs::create_dir_all(home.0.join(".postgresql")).unwrap();
        std::fs::copy(&other, home.0.join(".postgresql/root.crt")).unwrap();
        let mut require = tls_vars(&pg, "require", &other);
        require.retain(|(name, _)| *name != "PGSSLROOTCERT");
        let out = pgtenure(&home.0, &require, &["lease-run", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("UnknownIssuer"),
            "{}",
            text(&out.stderr)
        );
        std::fs::copy(&root, home.0.join(".postgresql/root.crt")).unwrap();
        let out = pgtenure(&home.0, &require, &["lease-run", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }

    #[test]
    fn a_self_signed_server_certificate_given_as_the_root_is_trusted() {
        let (cert, key) = self_signed();
        let pg = server_with(cert.clone(), key, None, None);
        let home = Scratch::new();
        let root = home.0.join("server.crt");
        std::fs::write(&root, cert).unwrap();
        for mode in ["require", "verify-ca", "verify-full"] {
            let out = pgtenure(
                &home.0,
                &tls_vars(&pg, mode, &root),
                &["lease-run", "k", "--", "true"],
            );
            assert_eq!(out.status.code(), Some(0), "{mode}: {}", text(&out.stderr));
        }
    }

    #[test]
    fn a_client_certificate_from_the_variables_reaches_a_cert_only_server() {
        let ca = Authority::new("pgtenure cli mutual CA");
        let (cert, key) = ca.server_cert(&["localhost"]);
        let pg = server_with(
            cert,
            key,
            Some(&ca.pem),
            Some("local all all trust\nhostssl all all 127.0.0.1/32 cert\n"),
        );
        let home = Scratch::new();
        let root = ca.write(&home.0, "ca.crt");
        let (client_cert, client_key) = ca.client_cert("postgres");
        let cert_file = home.0.join("client.crt");
        std::fs::write(&cert_file, client_cert).unwrap();
        let key_file = home.0.join("client.key");
        write_mode(&key_file, &client_key, 0o600);
        let mut vars = tls_vars(&pg, "verify-full", &root);
        let out = pgtenure(&home.0, &vars, &["lease-run", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("connection requires a valid client certificate"),
            "{}",
            text(&out.stderr)
        );
        vars.push(("PGSSLCERT", cert_file.display().to_string()));
        vars.push(("PGSSLKEY", key_file.display().to_string()));
        let out = pgtenure(&home.0, &vars, &["lease-run", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // libpq's default files, ~/.postgresql/postgresql.crt and .key, are used as well.
        vars.truncate(vars.len() - 2);
        let dir = home.0.join(".postgresql");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&cert_file, dir.join("postgresql.crt")).unwrap();
        std::fs::copy(&key_file, dir.join("postgresql.key")).unwrap();
        let out = pgtenure(&home.0, &vars, &["lease-run", "k", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}
