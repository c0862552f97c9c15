//! libpq's conventions: what a connection string leaves unset is taken from the service file
//! (`service=` or `PGSERVICE`), then from the `PG*` environment variables, then from libpq's
//! defaults; a password still missing is looked up in the password file (`~/.pgpass`). The same
//! precedence as psql: what the connection string says always wins.
//!
//! Hand-parsed (the formats are a few lines each), with no dependency, and unit-tested here.

use std::path::{Path, PathBuf};
use std::time::Duration;

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

// --- Service files -----------------------------------------------------------------------------

/// The service's `key=value` pairs, from the user's service file (`PGSERVICEFILE`, else
/// `~/.pg_service.conf`), else the system's (`PGSYSCONFDIR/pg_service.conf`, else
/// `/etc/postgresql-common/pg_service.conf`).
fn find_service(service: &str, env: &dyn Environment) -> Result<(PathBuf, Vec<(String, String)>)> {
    let user_file = env
        .var("PGSERVICEFILE")
        .map(PathBuf::from)
        .or_else(|| home(env).map(|h| h.join(".pg_service.conf")));
    let system_dir = env
        .var("PGSYSCONFDIR")
        .unwrap_or_else(|| "/etc/postgresql-common".to_owned());
    let system_file = Path::new(&system_dir).join("pg_service.conf");
    let mut looked = Vec::new();
    for file in user_file.into_iter().chain([system_file]) {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                looked.push(file.display().to_string());
                continue;
            }
            Err(e) => {
                return Err(Error::invalid_input(format!(
                    "service file {} cannot be read: {e}",
                    file.display()
                )))
            }
        };
        looked.push(file.display().to_string());
        if let Some(pairs) = service_section(&text, service)
            .map_err(|e| in_source(e, &format!("service file {}", file.display())))?
        {
            return Ok((file, pairs));
        }
    }
    Err(Error::invalid_input(format!(
        "service {service:?} is not defined in {}; define it there, or unset PGSERVICE",
        looked.join(" nor ")
    )))
}

/// The pairs of `[service]` in a service file's text: `None` when it has no such section.
fn service_section(text: &str, service: &str) -> Result<Option<Vec<(String, String)>>> {
    let mut found: Option<Vec<(String, String)>> = None;
    let mut inside = false;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[') {
            let Some(name) = name.strip_suffix(']') else {
                return Err(Error::invalid_input(format!(
                    "line {} has an unclosed [",
                    number + 1
                )));
            };
            if found.is_some() {
                // libpq takes the first section of that name.
                break;
            }
            inside = name.trim() == service;
            if inside {
                found = Some(Vec::new());
            }
            continue;
        }
        if !inside {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(Error::invalid_input(format!(
                "line {} is not key=value",
                number + 1
            )));
        };
        if let Some(pairs) = &mut found {
            pairs.push((key.trim().to_owned(), value.trim().to_owned()));
        }
    }
    Ok(found)
}

// --- The password file -------------------------------------------------------------------------

/// The password for the first host, port, database and user, from `PGPASSFILE` or `~/.pgpass`;
/// a file readable by group or others is ignored with a warning, as libpq does.
fn password_from_file(config: &postgres::Config, env: &dyn Environment) -> Option<String> {
    let file = env
        .var("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| home(env).map(|h| h.join(".pgpass")))?;
    let text = readable_password_file(&file)?;
    use postgres::config::Host;
    let user = config.get_user()?;
    let dbname = config.get_dbname().unwrap_or(user);
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    // libpq looks up each host's line; the driver takes one password for all hosts, so the first
    // host (in the list's order) that has a line gives it.
    let found = (0..hosts.len().max(addrs.len()).max(1)).find_map(|i| {
        // As in libpq: the default Unix socket directory is "localhost" to the password file;
        // another socket directory is matched by its path; an address alone by itself.
        let host = match hosts.get(i) {
            Some(Host::Tcp(host)) => host.clone(),
            #[cfg(unix)]
            Some(Host::Unix(path)) if path != Path::new(default_socket_dir()) => {
                path.display().to_string()
            }
            Some(_) => "localhost".to_owned(),
            None => addrs
                .get(i)
                .map_or_else(|| "localhost".to_owned(), ToString::to_string),
        };
        let port = ports
            .get(i)
            .or_else(|| ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string();
        lookup(&text, [host.as_str(), &port, dbname, user])
    });
    if found.is_some() {
        log::debug!(target: TARGET, "the password comes from {}", file.display());
    }
    found
}

/// The file's text, or `None` when it does not exist, is not a plain file or is open to group or
/// others (said with a warning, as libpq does).
fn readable_password_file(file: &Path) -> Option<String> {
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        log::warn!(
            target: TARGET,
            "password file {} is not a plain file; it is ignored",
            file.display()
        );
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            log::warn!(
                target: TARGET,
                "password file {} has group or world access (mode {:o}); it is ignored: \
                 permissions should be u=rw (0600) or less (chmod 600 {})",
                file.display(),
                mode & 0o777,
                file.display()
            );
            return None;
        }
    }
    std::fs::read_to_string(file).ok()
}

/// The password of the first line whose four fields match `wanted` (`*` matches anything;
/// `\:` and `\\` are a colon and a backslash).
fn lookup(text: &str, wanted: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let fields = split_fields(line);
        if fields.len() < 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field == "*" || field == want)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

/// A password file line's fields: split on unescaped colons, escapes removed; the fifth field
/// (the password) ends at the next unescaped colon, as in libpq.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(escaped), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(escaped);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            ':' => break,
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct Vars(HashMap<&'static str, String>);

    impl Environment for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
    }

    fn vars(pairs: &[(&'static str, &str)]) -> Vars {
        Vars(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect())
    }

    fn filled(url: &str, env: &Vars) -> Result<(postgres::Config, UrlParams)> {
        let (mut rest, mut params) = super::super::ssl::split(url)?;
        if let Some(port) = port_for_url(&params, env)? {
            rest = super::super::ssl::with_port(&rest, &port).unwrap_or(rest);
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
        let dir =
            std::env::temp_dir().join(format!("pgtenure-libpq-{name}-{}", std::process::id()));
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

    #[test]
    fn password_file_lines_match_with_wildcards_and_escapes() {
        let text = "# comment\n\
                    other:5432:*:app:wrong\n\
                    db.example:5432:app:app:first\n\
                    *:*:*:app:any\n\
                    db\\:colon:*:*:odd:p\\:a\\\\ss:with:colons\n";
        let want = |h, p, d, u| lookup(text, [h, p, d, u]);
        assert_eq!(
            want("db.example", "5432", "app", "app").as_deref(),
            Some("first")
        );
        assert_eq!(
            want("db.example", "5433", "app", "app").as_deref(),
            Some("any")
        );
        assert_eq!(want("db.example", "5432", "app", "nobody"), None);
        assert_eq!(
            want("db:colon", "1", "x", "odd").as_deref(),
            Some("p:a\\ss")
        );
    }

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
