//! libpq's conventions: what a connection string leaves unset is taken from the service file
//! (`service=` or `PGSERVICE`), then from the `PG*` environment variables, then from libpq's
//! defaults; a password still missing is looked up in the password file (`~/.pgpass`). The same
//! precedence as psql: what the connection string says always wins.
//!
//! Hand-parsed (the formats are a few lines each), with no dependency, and unit-tested here.

mod pgpass;
mod service;
#[cfg(test)]
mod test_env;

use std::path::{Path, PathBuf};
use std::time::Duration;

use self::pgpass::password_from_file;
use self::service::find_service;
use super::ssl::{SslMode, UrlParams};
use crate::error::{Error, Result};

const TARGET: &str = "pgtenure::db::libpq";

/// The keywords that environment variables and service files can set, with their variables.
const VARIABLES: &[(&str, &str)] = &[
    ("host", "PGHOST"),
    ("hostaddr", "PGHOSTADDR"),
    ("port", "PGPORT"),
    ("user", "PGUSER"),
    ("password", "PGPASSWORD"),
    ("dbname", "PGDATABASE"),
    ("options", "PGOPTIONS"),
    ("application_name", "PGAPPNAME"),
    ("connect_timeout", "PGCONNECT_TIMEOUT"),
    ("sslmode", "PGSSLMODE"),
    ("sslrootcert", "PGSSLROOTCERT"),
    ("sslcert", "PGSSLCERT"),
    ("sslkey", "PGSSLKEY"),
    ("target_session_attrs", "PGTARGETSESSIONATTRS"),
];

/// Where settings come from: the process's environment, or a test's.
pub(crate) trait Environment {
    /// A variable's value; unset, empty and non-UTF-8 values are `None` (libpq ignores an empty one).
    fn var(&self, name: &str) -> Option<String>;
}

/// The process's own environment.
pub(crate) struct Process;

impl Environment for Process {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

/// Fills what `config` and `params` leave unset, as libpq does: the service's values, then the
/// environment's, then libpq's defaults (a Unix socket, the login name), then a password from the
/// password file.
///
/// # Errors
///
/// `InvalidInput` for a service that no service file defines, a service file or variable with a
/// value that does not parse (naming where it came from).
pub(crate) fn fill(
    config: &mut postgres::Config,
    params: &mut UrlParams,
    env: &dyn Environment,
) -> Result<()> {
    let service = params.service.clone().or_else(|| env.var("PGSERVICE"));
    if let Some(service) = service {
        let (file, pairs) = find_service(&service, env)?;
        for (key, value) in pairs {
            if key == "service" {
                continue;
            }
            if !VARIABLES.iter().any(|(k, _)| *k == key) {
                return Err(Error::invalid_input(format!(
                    "service file {}: service {service:?} sets {key:?}, which pgtenure does not \
                     read; remove it or set it in the connection string",
                    file.display()
                )));
            }
            if !is_set(config, params, &key) {
                apply(config, params, &key, &value)
                    .map_err(|e| in_source(e, &format!("service file {}", file.display())))?;
            }
        }
    }
    for (key, variable) in VARIABLES {
        if is_set(config, params, key) {
            continue;
        }
        if let Some(value) = env.var(variable) {
            apply(config, params, key, &value).map_err(|e| in_source(e, variable))?;
        }
    }
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        config.host(default_socket_dir());
    }
    if config.get_user().is_none() {
        // libpq asks the system for the login name; USER and LOGNAME are what a login sets.
        if let Some(user) = env.var("USER").or_else(|| env.var("LOGNAME")) {
            config.user(&user);
        }
    }
    if config.get_password().is_none() {
        if let Some(password) = password_from_file(config, env) {
            config.password(password);
        }
    }
    Ok(())
}

/// The port that libpq would give a URL's hosts that name none: the service's, else `PGPORT`.
///
/// # Errors
///
/// As [`fill`], for the service.
pub(crate) fn port_for_url(params: &UrlParams, env: &dyn Environment) -> Result<Option<String>> {
    let service = params.service.clone().or_else(|| env.var("PGSERVICE"));
    if let Some(service) = service {
        let (_, pairs) = find_service(&service, env)?;
        if let Some((_, port)) = pairs.into_iter().find(|(k, _)| k == "port") {
            return Ok(Some(port));
        }
    }
    Ok(env.var("PGPORT"))
}

fn in_source(e: Error, source: &str) -> Error {
    Error::invalid_input(format!("{source}: {e}"))
}

/// Whether the connection string (or a source above this one) set `key`.
fn is_set(config: &postgres::Config, params: &UrlParams, key: &str) -> bool {
    match key {
        // Two keywords, as in libpq: an address from one source and its name from another.
        "host" => !config.get_hosts().is_empty(),
        "hostaddr" => !config.get_hostaddrs().is_empty(),
        "port" => !config.get_ports().is_empty(),
        "user" => config.get_user().is_some(),
        "password" => config.get_password().is_some(),
        "dbname" => config.get_dbname().is_some(),
        "options" => config.get_options().is_some(),
        "application_name" => config.get_application_name().is_some(),
        "connect_timeout" => config.get_connect_timeout().is_some(),
        "sslmode" => params.mode.is_some(),
        "sslrootcert" => params.root_cert.is_some(),
        "sslcert" => params.cert.is_some(),
        "sslkey" => params.key.is_some(),
        // The driver's default is `any`: only another value tells that it was set.
        "target_session_attrs" => {
            config.get_target_session_attrs() != postgres::config::TargetSessionAttrs::Any
        }
        _ => true,
    }
}

fn apply(
    config: &mut postgres::Config,
    params: &mut UrlParams,
    key: &str,
    value: &str,
) -> Result<()> {
    match key {
        "host" => {
            for host in value.split(',') {
                config.host(host.trim());
            }
        }
        "hostaddr" => {
            for addr in value.split(',') {
                let ip = addr.trim().parse().map_err(|_| {
                    Error::invalid_input(format!("hostaddr {addr:?} is not an IP address"))
                })?;
                config.hostaddr(ip);
            }
        }
        "port" => {
            for port in value.split(',') {
                let port = port.trim().parse::<u16>().map_err(|_| {
                    Error::invalid_input(format!("port {port:?} is not a port number"))
                })?;
                config.port(port);
            }
        }
        "user" => {
            config.user(value);
        }
        "password" => {
            config.password(value);
        }
        "dbname" => {
            config.dbname(value);
        }
        "options" => {
            config.options(value);
        }
        "application_name" => {
            config.application_name(value);
        }
        "connect_timeout" => {
            let seconds = value.trim().parse::<i64>().map_err(|_| {
                Error::invalid_input(format!("connect_timeout {value:?} is not whole seconds"))
            })?;
            // libpq: zero or less waits forever, and less than 2 s means 2 s.
            if seconds > 0 {
                config.connect_timeout(Duration::from_secs(seconds.max(2).unsigned_abs()));
            }
        }
        "sslmode" => params.mode = Some(SslMode::parse(value)?),
        "sslrootcert" => params.root_cert = Some(value.to_owned()),
        "sslcert" => params.cert = Some(value.to_owned()),
        "sslkey" => params.key = Some(value.to_owned()),
        "target_session_attrs" => {
            use postgres::config::TargetSessionAttrs;
            config.target_session_attrs(match value {
                "any" => TargetSessionAttrs::Any,
                "read-write" => TargetSessionAttrs::ReadWrite,
                "read-only" => TargetSessionAttrs::ReadOnly,
                other => {
                    return Err(Error::invalid_input(format!(
                        "target_session_attrs {other:?} is not one of any, read-write, read-only"
                    )))
                }
            });
        }
        _ => {}
    }
    Ok(())
}

/// libpq's default: the server's Unix socket directory (Debian's, else the upstream one).
fn default_socket_dir() -> &'static str {
    if Path::new("/var/run/postgresql").is_dir() {
        "/var/run/postgresql"
    } else {
        "/tmp"
    }
}

/// The user's home directory as libpq finds it: `HOME`, else (unset or empty, as under a service
/// manager or `env -i`) the effective user's entry in the password database.
pub(crate) fn home(env: &dyn Environment) -> Option<PathBuf> {
    if let Some(home) = env.var("HOME") {
        return Some(PathBuf::from(home));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // /proc/self belongs to the process's effective user.
        let euid = std::fs::metadata("/proc/self").ok()?.uid();
        let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
        home_in_passwd(&passwd, euid)
    }
    #[cfg(not(unix))]
    None
}

/// The home directory of `uid` in the text of `/etc/passwd` (`name:x:uid:gid:gecos:home:shell`).
#[cfg(unix)]
fn home_in_passwd(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[2].parse() == Ok(uid) && !fields[5].is_empty())
            .then(|| PathBuf::from(fields[5]))
    })
}

#[cfg(test)]
mod tests {
    use super::test_env::*;
    use super::*;

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

    /// libpq finds the home directory in the password database when `HOME` is unset (a service
    /// manager's environment, `env -i`): `~/.pgpass` and `~/.postgresql` are still found there.
    #[cfg(unix)]
    #[test]
    fn without_home_the_home_directory_comes_from_the_password_database() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nbroken\n\
                      postgres:x:101:104:PostgreSQL:/var/lib/postgresql:/bin/sh\nnohome:x:7:7::\n";
        assert_eq!(
            home_in_passwd(passwd, 101),
            Some(PathBuf::from("/var/lib/postgresql"))
        );
        assert_eq!(home_in_passwd(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(home_in_passwd(passwd, 7), None);
        assert_eq!(home_in_passwd(passwd, 9), None);
        assert_eq!(
            home(&vars(&[("HOME", "/given")])),
            Some(PathBuf::from("/given"))
        );
        // This process's own entry, when it has one.
        use std::os::unix::fs::MetadataExt;
        let euid = std::fs::metadata("/proc/self").unwrap().uid();
        let own = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|p| home_in_passwd(&p, euid));
        assert_eq!(home(&vars(&[])), own);
        assert!(own.is_some(), "uid {euid} has no home in /etc/passwd");
    }
}
