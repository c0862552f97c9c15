//! Tests of libpq's conventions as [`Db::builder`](crate::Db::builder) applies them (the
//! environment, service files, the password file), and what they share: an environment of their
//! own, a connection string filled as [`Db::builder`](crate::Db::builder) fills it, and scratch
//! files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::env::{default_socket_dir, vars, Vars};
use super::{fill, port_for_url};
use crate::db::ssl::{SslMode, UrlParams};
use crate::error::Result;

fn filled(url: &str, env: &Vars) -> Result<(postgres::Config, UrlParams)> {
    let (mut rest, mut params) = crate::db::ssl::split(url)?;
    if let Some(port) = port_for_url(&params, env)? {
        rest = crate::db::ssl::with_port(&rest, &port).unwrap_or(rest);
    }
    let mut config: postgres::Config = rest.parse().unwrap();
    fill(&mut config, &mut params, env)?;
    Ok((config, params))
}

/// A scratch directory, removed when dropped (a failed assertion included).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("pgtenure-libpq-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

#[cfg(unix)]
fn write_mode(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_environment_fills_what_the_url_leaves_unset_and_never_more() {
    use postgres::config::Host;
    let env = vars(&[
        ("PGHOST", "env-host"),
        ("PGPORT", "6543"),
        ("PGUSER", "env-user"),
        ("PGPASSWORD", "env-secret"),
        ("PGDATABASE", "env-db"),
        ("PGSSLMODE", "verify-full"),
        ("PGSSLROOTCERT", "/env/ca.pem"),
        ("PGSSLCERT", "/env/client.crt"),
        ("PGSSLKEY", "/env/client.key"),
        ("PGAPPNAME", "env-app"),
        ("PGCONNECT_TIMEOUT", "7"),
    ]);
    let (config, params) = filled("", &env).unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("env-host".into())]);
    assert_eq!(config.get_ports(), &[6543]);
    assert_eq!(config.get_user(), Some("env-user"));
    assert_eq!(config.get_password(), Some(&b"env-secret"[..]));
    assert_eq!(config.get_dbname(), Some("env-db"));
    assert_eq!(config.get_application_name(), Some("env-app"));
    assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(7)));
    assert_eq!(params.mode, Some(SslMode::VerifyFull));
    assert_eq!(params.root_cert.as_deref(), Some("/env/ca.pem"));
    assert_eq!(params.cert.as_deref(), Some("/env/client.crt"));
    assert_eq!(params.key.as_deref(), Some("/env/client.key"));

    // Whatever the URL says wins, field by field.
    let (config, params) = filled(
        "postgres://url-user:url-secret@url-host:5433/url-db?sslmode=require&application_name=url-app",
        &env,
    )
    .unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("url-host".into())]);
    assert_eq!(config.get_ports(), &[5433]);
    assert_eq!(config.get_user(), Some("url-user"));
    assert_eq!(config.get_password(), Some(&b"url-secret"[..]));
    assert_eq!(config.get_dbname(), Some("url-db"));
    assert_eq!(config.get_application_name(), Some("url-app"));
    assert_eq!(params.mode, Some(SslMode::Require));
    // ...and what it leaves unset comes from the environment.
    assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(7)));
    assert_eq!(params.root_cert.as_deref(), Some("/env/ca.pem"));

    // A URL with a host but no port takes PGPORT, as libpq does.
    let (config, _) = filled("host=h user=u", &env).unwrap();
    assert_eq!(config.get_ports(), &[6543]);
    let (config, _) = filled("postgres://u@h/db", &env).unwrap();
    assert_eq!(config.get_ports(), &[6543]);
    // A URL without a host takes PGHOST.
    let (config, _) = filled("postgres://u@/db", &env).unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("env-host".into())]);
}

/// libpq reads `host` and `hostaddr` as two keywords: `PGHOSTADDR` gives the address to
/// connect to and `PGHOST` (or the URL's host) the name (for TLS and the password file), so
/// psql reaches `PGHOST=db.invalid PGHOSTADDR=127.0.0.1`.
#[test]
fn host_and_hostaddr_are_filled_each_on_its_own() {
    use postgres::config::Host;
    let both = vars(&[("PGHOST", "db.invalid"), ("PGHOSTADDR", "127.0.0.1")]);
    let (config, _) = filled("", &both).unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("db.invalid".into())]);
    assert_eq!(
        config.get_hostaddrs(),
        &["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    let addr_only = vars(&[("PGHOSTADDR", "127.0.0.1")]);
    let (config, _) = filled("postgres://u@db.invalid/test", &addr_only).unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("db.invalid".into())]);
    assert_eq!(
        config.get_hostaddrs(),
        &["127.0.0.1".parse::<std::net::IpAddr>().unwrap()]
    );
    // An address alone in the URL takes its name from PGHOST.
    let host_only = vars(&[("PGHOST", "db.invalid")]);
    let (config, _) = filled("hostaddr=127.0.0.1 user=u", &host_only).unwrap();
    assert_eq!(config.get_hosts(), &[Host::Tcp("db.invalid".into())]);
    // Neither: the default socket, no address.
    let (config, _) = filled("", &vars(&[])).unwrap();
    assert!(matches!(config.get_hosts(), [Host::Unix(_)]));
    assert!(config.get_hostaddrs().is_empty());
}

#[test]
fn libpq_defaults_apply_when_nothing_is_set() {
    use postgres::config::Host;
    let (config, params) = filled("", &vars(&[("USER", "login")])).unwrap();
    assert!(matches!(config.get_hosts(), [Host::Unix(_)]));
    assert_eq!(config.get_user(), Some("login"));
    assert_eq!(config.get_password(), None);
    assert_eq!(params.mode, None);
}

#[test]
fn bad_environment_values_are_refused_naming_the_variable() {
    for (name, value, says) in [
        ("PGPORT", "five", "PGPORT: port \"five\""),
        ("PGSSLMODE", "on", "PGSSLMODE: sslmode \"on\""),
        ("PGCONNECT_TIMEOUT", "5s", "PGCONNECT_TIMEOUT"),
        ("PGHOSTADDR", "db.example", "PGHOSTADDR"),
    ] {
        let err = filled("", &vars(&[(name, value)])).unwrap_err();
        assert!(err.is_invalid_input(), "{name}");
        assert!(err.to_string().contains(says), "{name}: {err}");
    }
}

/// Service files (`service.rs`).
mod service {
    use super::*;

    #[test]
    fn a_service_supplies_what_the_url_leaves_unset_before_the_environment() {
        use postgres::config::Host;
        let scratch = temp_dir("service");
        let dir = &scratch.0;
        let file = dir.join("services.conf");
        std::fs::write(
            &file,
            "# services\n[other]\nhost=wrong\n\n[billing]\nhost = svc-host\nport=6000\n\
             dbname=billing\nsslmode=verify-ca\n[billing]\nhost=second\n",
        )
        .unwrap();
        let file_text = file.display().to_string();
        let env = vars(&[
            ("PGSERVICEFILE", &file_text),
            ("PGSERVICE", "billing"),
            ("PGHOST", "env-host"),
            ("PGUSER", "env-user"),
        ]);
        let (config, params) = filled("", &env).unwrap();
        assert_eq!(config.get_hosts(), &[Host::Tcp("svc-host".into())]);
        assert_eq!(config.get_ports(), &[6000]);
        assert_eq!(config.get_dbname(), Some("billing"));
        assert_eq!(config.get_user(), Some("env-user"));
        assert_eq!(params.mode, Some(SslMode::VerifyCa));
        // The connection string's own values and its service= win.
        let (config, _) = filled("host=url-host service=billing", &env).unwrap();
        assert_eq!(config.get_hosts(), &[Host::Tcp("url-host".into())]);
        assert_eq!(config.get_dbname(), Some("billing"));

        let dir_text = dir.display().to_string();
        let missing = vars(&[
            ("PGSERVICEFILE", &file_text),
            ("PGSERVICE", "nope"),
            ("PGSYSCONFDIR", &dir_text),
        ]);
        let err = filled("", &missing).unwrap_err();
        assert!(err.is_invalid_input());
        assert!(
            err.to_string().contains("service \"nope\" is not defined"),
            "{err}"
        );
        std::fs::write(&file, "[billing]\nhost=h\nsslcrl=/x\n").unwrap();
        let err = filled("", &env).unwrap_err();
        assert!(err.to_string().contains("sets \"sslcrl\""), "{err}");
    }
}

/// The password file (`pgpass.rs`).
mod pgpass {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_password_file_open_to_others_is_ignored() {
        let scratch = temp_dir("pgpass");
        let file = scratch.0.join("pgpass");
        let file_text = file.display().to_string();
        let env = vars(&[
            ("PGPASSFILE", &file_text),
            ("PGHOST", "db"),
            ("PGUSER", "app"),
        ]);
        write_mode(&file, "db:5432:app:app:from-file\n", 0o600);
        let (config, _) = filled("", &env).unwrap();
        assert_eq!(config.get_password(), Some(&b"from-file"[..]));
        // A password given anywhere else wins over the file.
        let (config, _) = filled("postgres://app:given@db/app", &env).unwrap();
        assert_eq!(config.get_password(), Some(&b"given"[..]));

        for open in [0o640, 0o644, 0o604] {
            write_mode(&file, "db:5432:app:app:from-file\n", open);
            let (config, _) = filled("", &env).unwrap();
            assert_eq!(config.get_password(), None, "mode {open:o}");
        }
    }

    /// As libpq (psql): a Unix socket is `localhost` to the password file only when it is the
    /// default socket directory; another one is matched by its path. And the password ends at the
    /// first unescaped colon.
    #[cfg(unix)]
    #[test]
    fn the_password_file_matches_sockets_and_colons_as_libpq_does() {
        let scratch = temp_dir("pgpass-socket");
        let file = scratch.0.join("pgpass");
        let file_text = file.display().to_string();
        write_mode(
            &file,
            "localhost:5432:*:app:as-localhost\n/srv/pg:5432:*:app:by-path\n\
             *:*:*:colons:pa\\:ss:trailing\n",
            0o600,
        );
        let at = |host: &str, user: &str| {
            let env = vars(&[("PGPASSFILE", &file_text), ("PGUSER", user)]);
            let (config, _) = filled(&format!("host={host}"), &env).unwrap();
            config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(at("/srv/pg", "app").as_deref(), Some("by-path"));
        assert_eq!(
            at(default_socket_dir(), "app").as_deref(),
            Some("as-localhost")
        );
        assert_eq!(at("localhost", "app").as_deref(), Some("as-localhost"));
        assert_eq!(at("/elsewhere", "app"), None);
        assert_eq!(at("db", "colons").as_deref(), Some("pa:ss"));
    }

    /// Several hosts: the first whose line the password file has gives the password (psql
    /// reaches `PGHOST=a,b PGPORT=1,55432` with a line for the second only).
    #[cfg(unix)]
    #[test]
    fn the_password_file_is_searched_for_each_host_in_order() {
        let scratch = temp_dir("pgpass-hosts");
        let file = scratch.0.join("pgpass");
        let file_text = file.display().to_string();
        write_mode(&file, "b:55432:*:app:second\nc:*:*:app:third\n", 0o600);
        let env = vars(&[("PGPASSFILE", &file_text), ("PGUSER", "app")]);
        let password = |conn: &str| {
            let (config, _) = filled(conn, &env).unwrap();
            config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        };
        assert_eq!(password("host=a,b port=1,55432").as_deref(), Some("second"));
        assert_eq!(password("host=a,c,b port=55432").as_deref(), Some("third"));
        assert_eq!(password("host=a,b port=1,2"), None);
    }
}
