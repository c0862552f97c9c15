//! Service files (`service=` or `PGSERVICE`): where libpq looks for them, and a service's section.

use std::path::{Path, PathBuf};

use super::{home, in_source, Environment};
use crate::error::{Error, Result};

/// The service's `key=value` pairs, from the user's service file (`PGSERVICEFILE`, else
/// `~/.pg_service.conf`), else the system's (`PGSYSCONFDIR/pg_service.conf`, else
/// `/etc/postgresql-common/pg_service.conf`).
pub(super) fn find_service(
    service: &str,
    env: &dyn Environment,
) -> Result<(PathBuf, Vec<(String, String)>)> {
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

#[cfg(test)]
mod tests {
    use super::super::test_env::*;
    use crate::db::ssl::SslMode;

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
