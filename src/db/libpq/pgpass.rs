//! The password file (`PGPASSFILE`, else `~/.pgpass`): which file, whether it may be read, and
//! which of its lines gives the password.

use std::path::{Path, PathBuf};

use super::env::{default_socket_dir, home, Environment};

const TARGET: &str = "pgtenure::db::libpq";

/// The password for the first host, port, database and user, from `PGPASSFILE` or `~/.pgpass`;
/// a file readable by group or others is ignored with a warning, as libpq does.
pub(super) fn password_from_file(
    config: &postgres::Config,
    env: &dyn Environment,
) -> Option<String> {
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
    use super::*;

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
}
