//! What the tests of libpq's conventions share: an environment of their own, a connection string
//! filled as [`Db::builder`](crate::Db::builder) fills it, and scratch files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{fill, port_for_url, Environment};
use crate::db::ssl::UrlParams;
use crate::error::Result;

/// A test's environment variables.
pub(super) struct Vars(pub(super) HashMap<&'static str, String>);

impl Environment for Vars {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}

pub(super) fn vars(pairs: &[(&'static str, &str)]) -> Vars {
    Vars(pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect())
}

pub(super) fn filled(url: &str, env: &Vars) -> Result<(postgres::Config, UrlParams)> {
    let (mut rest, mut params) = crate::db::ssl::split(url)?;
    if let Some(port) = port_for_url(&params, env)? {
        rest = crate::db::ssl::with_port(&rest, &port).unwrap_or(rest);
    }
    let mut config: postgres::Config = rest.parse().unwrap();
    fill(&mut config, &mut params, env)?;
    Ok((config, params))
}

/// A scratch directory, removed when dropped (a failed assertion included).
pub(super) struct Scratch(pub(super) PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn temp_dir(name: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("pgtenure-libpq-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

#[cfg(unix)]
pub(super) fn write_mode(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
