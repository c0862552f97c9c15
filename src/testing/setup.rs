//! Setting up a throwaway server's home: the binaries, the user it runs as, its directory,
//! `initdb`, a free port, and retrying a start that lost its port.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};
use crate::instance::random_u64;

/// How many times a start is tried (another process may take the chosen port first).
const START_ATTEMPTS: u32 = 3;

/// The user a server runs as.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunAs {
    pub(super) uid: u32,
    pub(super) gid: u32,
}

/// Tries `start` up to three times (another process may take the chosen port first).
pub(super) fn retry_start<T>(mut start: impl FnMut() -> Result<T>) -> Result<T> {
    let mut last_error = None;
    for _ in 0..START_ATTEMPTS {
        match start() {
            Ok(started) => return Ok(started),
            Err(e) => {
                log::warn!(target: "pgtenure::testing", "a temporary server did not start: {e}");
                last_error = Some(e);
            }
        }
    }
    Err(last_error.expect("at least one attempt"))
}

/// Finds the directory holding `initdb` and `postgres`.
pub(super) fn find_bindir() -> Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("PGTENURE_PG_BINDIR") {
        candidates.push(dir.into());
    }
    if let Ok(out) = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
    {
        if out.status.success() {
            candidates.push(String::from_utf8_lossy(&out.stdout).trim().into());
        }
    }
    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versioned.sort();
    candidates.extend(versioned.into_iter().rev().map(|(_, dir)| dir));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    first_with_server(candidates)
}

/// The first directory holding both `initdb` and `postgres`.
fn first_with_server(candidates: Vec<PathBuf>) -> Result<PathBuf> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    candidates
        .into_iter()
        .find(|dir| has_server(dir))
        .ok_or_else(|| {
            Error::setup(
                "the PostgreSQL server binaries (initdb, postgres) were not found: install them \
             (Debian/Ubuntu: `apt-get install -y postgresql`) or set PGTENURE_PG_BINDIR, or set \
             DATABASE_URL to a running server",
            )
        })
}

/// The user to run the server as: `None` for this process's own user, unless that is root.
pub(super) fn run_as() -> Result<Option<RunAs>> {
    // /proc/self belongs to the process's effective user.
    let euid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if euid != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
    let lookup = |name: &str| {
        passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            (fields.len() > 3 && fields[0] == name).then(|| {
                Some(RunAs {
                    uid: fields[2].parse().ok()?,
                    gid: fields[3].parse().ok()?,
                })
            })?
        })
    };
    lookup("postgres")
        .or_else(|| lookup("nobody"))
        .map(Some)
        .ok_or_else(|| {
            Error::setup(
                "running as root, and neither a `postgres` nor a `nobody` user exists to run the \
             temporary server as (PostgreSQL refuses to run as root)",
            )
        })
}

/// Makes the server's directory, private to the user it runs as.
pub(super) fn make_dir(run_as: Option<RunAs>) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "pgtenure-{}-{:012x}",
        std::process::id(),
        random_u64() >> 16
    ));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::setup(format!("could not create {}", dir.display())).with_source(e))?;
    if let Some(user) = run_as {
        std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).map_err(|e| {
            let _ = fs::remove_dir(&dir);
            Error::setup(format!(
                "could not give {} to uid {}",
                dir.display(),
                user.uid
            ))
            .with_source(e)
        })?;
    }
    Ok(dir)
}

pub(super) fn initdb(bindir: &Path, dir: &Path, run_as: Option<RunAs>) -> Result<()> {
    let mut command = Command::new(bindir.join("initdb"));
    command
        .arg("-D")
        .arg(dir.join("data"))
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "-N",
        ])
        .current_dir(dir)
        .stdin(Stdio::null());
    if let Some(user) = run_as {
        command.uid(user.uid).gid(user.gid);
    }
    let out = command.output().map_err(|e| {
        let denied = e.kind() == std::io::ErrorKind::PermissionDenied;
        match run_as
            .filter(|_| denied)
            .and_then(|user| closed_ancestor(dir, user))
        {
            Some(closed) => Error::setup(format!(
                "could not run {}/initdb as uid {} (the server may not run as root): it \
                 cannot enter {}, which holds the server's directory {}; set TMPDIR to a \
                 directory that user can reach, or open this one (chmod o+x {})",
                bindir.display(),
                run_as.map_or(0, |u| u.uid),
                closed.display(),
                dir.display(),
                closed.display()
            )),
            None => Error::setup(format!("could not run {}/initdb", bindir.display())),
        }
        .with_source(e)
    })?;
    if !out.status.success() {
        return Err(Error::setup(format!(
            "initdb failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// The first directory above `dir` that `user` may not enter by its mode bits (a private
/// `TMPDIR` of mode 0700 owned by root), to say so; `None` when the bits let it through.
fn closed_ancestor(dir: &Path, user: RunAs) -> Option<PathBuf> {
    dir.ancestors().skip(1).find_map(|a| {
        let meta = fs::metadata(a).ok()?;
        let mode = meta.mode();
        let enters = (meta.uid() == user.uid && mode & 0o100 != 0)
            || (meta.gid() == user.gid && mode & 0o010 != 0)
            || mode & 0o001 != 0;
        (!enters).then(|| a.to_owned())
    })
}

/// A port that was free a moment ago (the kernel's choice for port 0).
pub(super) fn free_port() -> Result<u16> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::setup("could not find a free port on 127.0.0.1").with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_name_the_package_to_install() {
        let err = first_with_server(vec![PathBuf::from("/nonexistent/bin")]).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Setup);
        assert!(
            err.to_string().contains("apt-get install -y postgresql"),
            "{err}"
        );
    }
}
