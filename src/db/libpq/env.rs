//! Where libpq's settings come from besides the connection string: the environment (the
//! process's, or a test's), and the places libpq falls back to (the user's home directory, the
//! server's socket directory).

use std::path::{Path, PathBuf};

use crate::error::Error;

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

/// A test's environment variables.
#[cfg(test)]
pub(super) struct Vars(pub(super) std::collections::HashMap<&'static str, String>);

#[cfg(test)]
impl Environment for Vars {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}

#[cfg(test)]
pub(super) fn vars(pairs: &[(&'static str, &str)]) -> Vars {
    Vars(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect())
}

/// An error in a value from `source` (a variable, a service file), naming it.
pub(super) fn in_source(e: Error, source: &str) -> Error {
    Error::invalid_input(format!("{source}: {e}"))
}

/// libpq's default: the server's Unix socket directory (Debian's, else the upstream one).
pub(super) fn default_socket_dir() -> &'static str {
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
    use super::*;

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
