//! A throwaway PgBouncer in transaction pooling mode, in front of a database.

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use super::supervised::Supervised;
use super::{free_port, make_dir, retry_start, run_as, RunAs};
use crate::error::{Error, Result};

const SUPERVISOR: &str = r#"
set -u
bin=$1; dir=$2
"$bin" "$dir/pgbouncer.ini" >>"$dir/server.log" 2>&1 &
pid=$!
echo "started $pid"
cat >/dev/null
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
"#;

/// The server connections [`PgBouncer::start`] allows per user and database.
const DEFAULT_POOL_SIZE: u32 = 60;

/// Where PgBouncer connects.
struct Upstream {
    host: String,
    port: u16,
    user: String,
    dbname: String,
}

/// A throwaway PgBouncer in transaction pooling mode in front of an upstream database, stopped and
/// removed like a [`TempPostgres`](super::TempPostgres) (on drop, or when this process exits).
///
/// It ignores the `options` startup parameter (`ignore_startup_parameters = extra_float_digits,
/// options`), as PgBouncer must to accept [`Db::connect`](crate::Db::connect)'s READ COMMITTED
/// option: behind it, the server's default isolation applies. Authentication is `trust` for the
/// upstream URL's user; the upstream must accept that user without a password.
pub struct PgBouncer {
    url: String,
    bouncer: Supervised,
}

impl PgBouncer {
    /// Starts PgBouncer (from `PATH` or `/usr/sbin`) on a free port of 127.0.0.1 in front of the
    /// TCP database `upstream`, and waits until a query goes through it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when `pgbouncer` is not installed (the message
    /// names the package), `upstream` is not a TCP URL, or it does not start; its log is quoted.
    pub fn start(upstream: &str) -> Result<PgBouncer> {
        PgBouncer::start_with_pool_size(upstream, DEFAULT_POOL_SIZE)
    }

    /// Like [`PgBouncer::start`], with at most `pool_size` server connections (PgBouncer's
    /// `default_pool_size`; [`PgBouncer::start`] uses 60): few server connections shared by many
    /// clients, as in production.
    ///
    /// # Errors
    ///
    /// As [`PgBouncer::start`]; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when
    /// `pool_size` is zero.
    pub fn start_with_pool_size(upstream: &str, pool_size: u32) -> Result<PgBouncer> {
        if pool_size == 0 {
            return Err(Error::invalid_input("PgBouncer pool_size is zero"));
        }
        let config = upstream
            .parse::<postgres::Config>()
            .map_err(|e| Error::invalid_input("the upstream URL does not parse").with_source(e))?;
        let host = match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            _ => return Err(Error::invalid_input("PgBouncer needs a TCP upstream URL")),
        };
        let upstream_port = config.get_ports().first().copied().unwrap_or(5432);
        let user = config.get_user().unwrap_or("postgres").to_owned();
        let dbname = config.get_dbname().unwrap_or(&user).to_owned();
        let binary = find_pgbouncer()?;
        let run_as = run_as()?;
        let upstream = Upstream {
            host,
            port: upstream_port,
            user,
            dbname,
        };
        retry_start(|| PgBouncer::start_once(&binary, run_as, &upstream, pool_size))
    }

    fn start_once(
        binary: &Path,
        run_as: Option<RunAs>,
        upstream: &Upstream,
        pool_size: u32,
    ) -> Result<PgBouncer> {
        let Upstream {
            host,
            port: upstream_port,
            user,
            dbname,
        } = upstream;
        let dir = make_dir(run_as)?;
        let port = free_port()?;
        let ini = format!(
            "[databases]\n\
             * = host={host} port={upstream_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/userlist.txt\n\
             pool_mode = transaction\n\
             max_client_conn = 2000\n\
             default_pool_size = {pool_size}\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             pidfile = {dir}/pgbouncer.pid\n",
            dir = dir.display()
        );
        let users = format!("\"{user}\" \"\"\n\"postgres\" \"\"\n");
        let written = fs::write(dir.join("pgbouncer.ini"), ini)
            .and_then(|()| fs::write(dir.join("userlist.txt"), users));
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&dir);
            return Err(Error::setup("could not write PgBouncer's configuration").with_source(e));
        }
        let args: [&OsStr; 2] = [binary.as_os_str(), dir.as_os_str()];
        let bouncer = Supervised::spawn("PgBouncer", SUPERVISOR, &args, dir.clone(), port, run_as)?;
        let bouncer = PgBouncer {
            url: format!("postgres://{user}@127.0.0.1:{port}/{dbname}"),
            bouncer,
        };
        bouncer.bouncer.wait_ready(&bouncer.url)?;
        log::info!(target: "pgtenure::testing", "temporary PgBouncer on port {port}");
        Ok(bouncer)
    }

    /// A connection URL through PgBouncer, for the upstream's user and database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.bouncer.port()
    }

    /// Stops PgBouncer and deletes its directory. Dropping does the same and logs what fails.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when it did not stop in time.
    pub fn stop(self) -> Result<()> {
        self.bouncer.shutdown()
    }
}

impl fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBouncer").field("url", &self.url).finish()
    }
}

fn find_pgbouncer() -> Result<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("pgbouncer"))
                .collect()
        })
        .unwrap_or_default();
    candidates.push(PathBuf::from("/usr/sbin/pgbouncer"));
    candidates.into_iter().find(|path| path.is_file()).ok_or_else(|| {
        Error::setup("pgbouncer was not found: install it (Debian/Ubuntu: `apt-get install -y pgbouncer`)")
    })
}
