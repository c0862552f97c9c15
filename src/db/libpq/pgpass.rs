//! The password file (`PGPASSFILE`, else `~/.pgpass`): which file, whether it may be read, and
//! which of its lines gives the password.

use std::path::{Path, PathBuf};

use super::{default_socket_dir, home, Environment, TARGET};

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
    use super::super::test_env::*;
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
