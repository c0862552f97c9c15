//! Throwaway PostgreSQL servers for tests (feature `testing`).
//!
//! [`TempPostgres::start`] runs `initdb` and `postgres` from the installed server binaries in a new
//! temporary directory, on a free port of 127.0.0.1, and returns once the server accepts
//! connections. Dropping it stops the server and deletes the directory.
//!
//! The server runs under a small supervising shell process that reads commands from a pipe held by
//! this process. When the pipe closes, because the `TempPostgres` was dropped or because this process
//! exited in any way (a panic, `std::process::exit`, even `SIGKILL`), the supervisor stops the server
//! and deletes the directory. So a `TempPostgres` kept in a `static`, which Rust never drops, leaves
//! nothing behind either; [`database_url`] relies on that.
//!
//! PostgreSQL refuses to run as root: when this process runs as root, the directory is given to, and
//! the server run as, the `postgres` user if there is one, else `nobody`.
//!
//! The server is tuned for tests: `fsync`, `synchronous_commit` and `full_page_writes` are off (a
//! crash loses nothing a test needs), `max_connections` is 300. [`TempPostgres::builder`] adds
//! settings, files in the data directory (a certificate and key for `ssl = on`) and a
//! `pg_hba.conf` of the test's own.
//!
//! [`ReplicatedPostgres`] is a primary with one streaming standby (synchronous or asynchronous),
//! whose replication can be frozen, and a failover to the standby; it is supervised and cleaned up
//! the same way.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! let pg = pgtenure::testing::TempPostgres::start()?;
//! let db = pgtenure::Db::connect(pg.url())?;
//! pgtenure::migrate(&db)?;
//! # Ok(())
//! # }
//! ```

mod pgbouncer;
mod replica;
mod setup;
mod supervised;

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

pub use self::pgbouncer::PgBouncer;
pub use self::replica::{ReplicatedPostgres, Replication};
use self::setup::{find_bindir, free_port, initdb, make_dir, retry_start, run_as, RunAs};
use self::supervised::Supervised;
use crate::error::{Error, Result};

/// The supervisor: starts the server, obeys `stop` and `start` lines, and on end of input (the owning
/// process is gone or dropped its handle) stops the server and deletes the directory.
const SUPERVISOR: &str = r#"
set -u
bin=$1; dir=$2; port=$3
pid=
start() {
    "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
        -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
        -c max_connections=300 -c log_min_messages=warning >>"$dir/server.log" 2>&1 &
    pid=$!
    echo "started $pid"
}
stop() {
    if [ -n "$pid" ]; then
        kill "-$1" "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        pid=
    fi
    echo stopped
}
start
while read -r cmd; do
    case "$cmd" in
        start) [ -n "$pid" ] || start ;;
        stop) stop INT ;;
    esac
done
stop QUIT >/dev/null
"#;

/// A throwaway PostgreSQL server; see the [module docs](self).
pub struct TempPostgres {
    url: String,
    server: Supervised,
}

impl TempPostgres {
    /// Starts a new server and waits (up to a minute) until it accepts connections.
    ///
    /// The server binaries are found through `$PGTENURE_PG_BINDIR`, then `pg_config --bindir`, then
    /// the newest `/usr/lib/postgresql/*/bin`, then `initdb` on `PATH`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::error::ErrorKind::Setup) when the binaries are missing (the message names
    /// the package to install), the directory cannot be made, `initdb` fails, or the server does not
    /// start; the server's log is quoted.
    pub fn start() -> Result<TempPostgres> {
        TempPostgres::builder().start()
    }

    /// A server with settings, files or a `pg_hba.conf` of your own; see [`TempPostgresBuilder`].
    pub fn builder() -> TempPostgresBuilder {
        TempPostgresBuilder::default()
    }

    fn start_once(
        bindir: &Path,
        run_as: Option<RunAs>,
        own: &TempPostgresBuilder,
    ) -> Result<TempPostgres> {
        let dir = make_dir(run_as)?;
        if let Err(e) = initdb(bindir, &dir, run_as).and_then(|()| own.apply(&dir, run_as)) {
            let _ = fs::remove_dir_all(&dir);
            return Err(e);
        }
        let port = free_port()?;
        let port_text = port.to_string();
        let args: [&OsStr; 3] = [bindir.as_os_str(), dir.as_os_str(), OsStr::new(&port_text)];
        let server = Supervised::spawn(
            "PostgreSQL server",
            SUPERVISOR,
            &args,
            dir.clone(),
            port,
            run_as,
        )?;
        let pg = TempPostgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            server,
        };
        pg.server.wait_ready(&pg.url)?;
        log::info!(target: "pgtenure::testing", "temporary server on port {port} in {}", dir.display());
        Ok(pg)
    }

    /// A connection URL for the `postgres` database as the `postgres` superuser (trust auth).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.server.port()
    }

    /// The server's directory (data, socket and `server.log`), deleted when stopped.
    pub fn dir(&self) -> &Path {
        self.server.dir()
    }

    /// Stops the server (fast shutdown: sessions are disconnected) and starts it again on the same
    /// data and port, waiting until it accepts connections. For fault tests.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::error::ErrorKind::Setup) when the server does not come back.
    pub fn restart(&self) -> Result<()> {
        self.restart_after(Duration::ZERO)
    }

    /// As [`TempPostgres::restart`], with the server down for `downtime` in between: an outage of
    /// a known length, for fault tests (how fast does a pool come back?).
    ///
    /// # Errors
    ///
    /// As [`TempPostgres::restart`].
    pub fn restart_after(&self, downtime: Duration) -> Result<()> {
        self.server.send("stop")?;
        self.server.expect_reply("stopped")?;
        std::thread::sleep(downtime);
        self.server.send("start")?;
        self.server.expect_reply("started")?;
        self.server.wait_ready(&self.url)
    }

    /// Stops the server and deletes its directory, waiting up to 30 s. Dropping does the same and
    /// logs what fails.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::error::ErrorKind::Setup) when the supervisor did not finish in time (it
    /// and the server are then killed) or the directory is still there.
    pub fn stop(self) -> Result<()> {
        self.server.shutdown()
    }
}

/// What a [`TempPostgres`] has beyond the defaults: server settings, files in its data directory,
/// its own `pg_hba.conf`.
///
/// ```no_run
/// # fn main() -> Result<(), pgtenure::Error> {
/// # let (cert, key) = (String::new(), String::new());
/// let pg = pgtenure::testing::TempPostgres::builder()
///     .setting("ssl", "on")?
///     .file("server.crt", cert)?
///     .file("server.key", key)?
///     .hba("hostssl all all 127.0.0.1/32 trust\n")
///     .start()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default, Clone)]
pub struct TempPostgresBuilder {
    settings: Vec<(String, String)>,
    files: Vec<(String, Vec<u8>)>,
    hba: Option<String>,
}

impl TempPostgresBuilder {
    /// A line `name = 'value'` added to `postgresql.conf` (paths in values are relative to the
    /// data directory: `ssl_cert_file = 'server.crt'`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when `name` is not a setting's
    /// name (letters, digits, `_` and `.`) or `value` holds a line break or a NUL byte.
    pub fn setting(mut self, name: &str, value: &str) -> Result<TempPostgresBuilder> {
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        if !plain || value.contains(['\n', '\r', '\0']) {
            return Err(Error::invalid_input(format!(
                "server setting {name:?}: the name must be letters, digits, _ and ., the value one \
                 line"
            )));
        }
        self.settings.push((name.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// A file written into the data directory before the server starts, readable by the server's
    /// user only (as PostgreSQL wants of a private key).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when `name` is not a plain
    /// file name (empty, `.`, `..`, or holding `/` or a NUL byte).
    pub fn file(mut self, name: &str, contents: impl Into<Vec<u8>>) -> Result<TempPostgresBuilder> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(Error::invalid_input(format!(
                "file name {name:?} is not a plain file name"
            )));
        }
        self.files.push((name.to_owned(), contents.into()));
        Ok(self)
    }

    /// Replaces `pg_hba.conf` (by default: trust for every local and 127.0.0.1 connection).
    pub fn hba(mut self, text: &str) -> TempPostgresBuilder {
        self.hba = Some(text.to_owned());
        self
    }

    /// Starts the server, as [`TempPostgres::start`] does.
    ///
    /// # Errors
    ///
    /// Those of [`TempPostgres::start`]; the server's log says what it refused of the settings.
    pub fn start(self) -> Result<TempPostgres> {
        let bindir = find_bindir()?;
        let run_as = run_as()?;
        retry_start(|| TempPostgres::start_once(&bindir, run_as, &self))
    }

    fn apply(&self, dir: &Path, run_as: Option<RunAs>) -> Result<()> {
        let data = dir.join("data");
        let write = |name: &str, contents: &[u8]| -> Result<()> {
            let path = data.join(name);
            fs::write(&path, contents)
                .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o600)))
                .and_then(|()| match run_as {
                    Some(user) => std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid)),
                    None => Ok(()),
                })
                .map_err(|e| {
                    Error::setup(format!("could not write {}", path.display())).with_source(e)
                })
        };
        for (name, contents) in &self.files {
            write(name, contents)?;
        }
        if let Some(hba) = &self.hba {
            write("pg_hba.conf", hba.as_bytes())?;
        }
        if !self.settings.is_empty() {
            let conf = data.join("postgresql.conf");
            let mut text = fs::read_to_string(&conf).map_err(|e| {
                Error::setup(format!("could not read {}", conf.display())).with_source(e)
            })?;
            for (name, value) in &self.settings {
                text.push_str(&format!("\n{name} = '{}'", value.replace('\'', "''")));
            }
            text.push('\n');
            write("postgresql.conf", text.as_bytes())?;
        }
        Ok(())
    }
}

impl fmt::Debug for TempPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TempPostgres")
            .field("url", &self.url)
            .field("dir", &self.dir())
            .finish()
    }
}

/// The database URL tests should use: `$DATABASE_URL` when set, else the URL of one `TempPostgres`
/// started on first use and shared by the whole process (it stops when the process exits).
///
/// # Errors
///
/// The error of [`TempPostgres::start`], every time it is called, when the server could not start.
pub fn database_url() -> Result<String> {
    static SHARED: OnceLock<std::result::Result<TempPostgres, String>> = OnceLock::new();
    if let Ok(url) = std::env::var("DATABASE_URL") {
        if !url.trim().is_empty() {
            return Ok(url);
        }
    }
    match SHARED.get_or_init(|| TempPostgres::start().map_err(|e| e.to_string())) {
        Ok(pg) => Ok(pg.url().to_owned()),
        Err(message) => Err(Error::setup(message.clone())),
    }
}

/// A statement of the crate's `sql/` directory with its tables substituted exactly as pgtenure
/// substitutes them (`{table}`, `{units}`, `{processes}` and the names derived from them), so that
/// benchmarks and tests can run the very statement through other clients (`pgbench`, `EXPLAIN`).
/// `tables` maps each placeholder to a table name (`("table", "pgtenure_leases")`).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when a table name is not a plain
/// identifier.
pub fn render_sql(sql: &str, tables: &[(&str, &str)]) -> Result<String> {
    let parsed = tables
        .iter()
        .map(|(placeholder, name)| Ok((*placeholder, crate::table_name::TableName::parse(name)?)))
        .collect::<Result<Vec<_>>>()?;
    let named: Vec<(&str, &crate::table_name::TableName)> = parsed
        .iter()
        .map(|(placeholder, table)| (*placeholder, table))
        .collect();
    Ok(crate::table_name::render_tables(sql, &named))
}

/// How many of `db`'s connections lie parked for the threads that used them last
/// ([`DbBuilder::thread_affinity`](crate::DbBuilder::thread_affinity)), for tests of when they go
/// back to the pool. Unlike [`Db::pool_state`](crate::Db::pool_state), it gives none back.
pub fn parked_connections(db: &crate::Db) -> usize {
    db.parked()
}

/// How many of `db`'s checkouts wait for a connection, for tests that must act while one waits.
/// Counted in the pools pgtenure builds; 0 for a pool of the application's own
/// ([`Db::from_pool`](crate::Db::from_pool)).
pub fn waiting_checkouts(db: &crate::Db) -> usize {
    db.waiting_checkouts()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<TempPostgres>();
    }
}
