//! libpq's conventions: what a connection string leaves unset is taken from the service file
//! (`service=` or `PGSERVICE`), then from the `PG*` environment variables, then from libpq's
//! defaults; a password still missing is looked up in the password file (`~/.pgpass`). The same
//! precedence as psql: what the connection string says always wins.
//!
//! Hand-parsed (the formats are a few lines each), with no dependency, and unit-tested here.

mod env;
mod pgpass;
mod service;
#[cfg(test)]
mod tests;

use std::time::Duration;

// The home directory, where `tls.rs` finds libpq's default files (`~/.postgresql/`).
#[cfg(feature = "tls")]
pub(crate) use self::env::home;
use self::env::{default_socket_dir, in_source};
pub(crate) use self::env::{Environment, Process};
use self::pgpass::password_from_file;
use self::service::find_service;
use super::ssl::{SslMode, UrlParams};
use crate::error::{Error, Result};

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
