//! Service files (`service=` or `PGSERVICE`): where libpq looks for them, and a service's section.

use std::path::{Path, PathBuf};

use super::env::{home, in_source, Environment};
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
