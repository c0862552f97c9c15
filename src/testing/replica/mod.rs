//! A throwaway primary with one streaming standby, and a failover to it.

mod forwarder;

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use self::forwarder::{Forwarder, POLL};
use super::supervised::Supervised;
use super::{find_bindir, free_port, initdb, make_dir, retry_start, run_as, RunAs};
use crate::error::{Error, Result};
use crate::row::Read as Columns;

const STANDBY_STATE: &str = include_str!("../../../sql/testing/standby_state.sql");
const RECEIVED_LSN: &str = include_str!("../../../sql/testing/received_lsn.sql");
const LAG: &str = include_str!("../../../sql/testing/lag.sql");
const PROMOTE: &str = include_str!("../../../sql/testing/promote.sql");

/// The standby's `application_name`, named by the primary's `synchronous_standby_names` in
/// synchronous mode, and its replication slot's name.
const STANDBY_NAME: &str = "pgtenure_standby";

/// How long a start waits for the standby to stream, and a failover for the promoted standby to
/// accept a write.
const WAIT: Duration = Duration::from_secs(60);

/// The supervisor of each of the two servers: runs `postgres` with the extra arguments it is given,
/// obeys `crash` (PostgreSQL's immediate shutdown, as `pg_ctl stop -m immediate`, answered
/// `crashed`), and on end of input stops the server the same way and deletes the directory.
/// Unlike a [`TempPostgres`](super::TempPostgres), `synchronous_commit` is left to the
/// configuration: synchronous replication needs it.
const SUPERVISOR: &str = r#"
set -u
bin=$1; dir=$2; port=$3
shift 3
"$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" -c listen_addresses=127.0.0.1 \
    -c fsync=off -c max_connections=200 -c log_min_messages=warning "$@" >>"$dir/server.log" 2>&1 &
pid=$!
echo "started $pid"
crash() {
    if [ -n "$pid" ]; then
        "$bin/pg_ctl" -D "$dir/data" -m immediate stop >>"$dir/server.log" 2>&1 \
            || kill -QUIT "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        pid=
    fi
}
while read -r cmd; do
    case "$cmd" in
        crash) crash; echo crashed ;;
    esac
done
crash
"#;

/// How the standby of a [`ReplicatedPostgres`] confirms the primary's commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Replication {
    /// The primary's `synchronous_standby_names` names the standby and `synchronous_commit` is
    /// `on`: a commit returns once the standby has flushed its WAL, so a failover loses no
    /// acknowledged commit (and a standby that stops answering holds every commit up).
    Synchronous,
    /// A commit returns once the primary has it; the standby follows as fast as it can, and a
    /// failover loses what it had not received yet
    /// ([`ReplicatedPostgres::freeze_replication`] makes that window as wide as a test wants).
    Asynchronous,
}

/// A throwaway primary with one streaming standby, for failover tests (feature `testing`).
///
/// [`ReplicatedPostgres::start`] runs `initdb` for the primary, starts it, makes the standby with
/// `pg_basebackup -R` (a physical replication slot, WAL streamed during the copy), starts it, and
/// returns once the primary sees the standby streaming (as a synchronous standby in
/// [`Replication::Synchronous`]). It takes about 2–4 s on a small machine, most of it `initdb`.
///
/// The standby replicates through a small TCP forwarder inside this process (on 127.0.0.1), which
/// [`freeze_replication`](ReplicatedPostgres::freeze_replication) stops: the standby then receives
/// no WAL until [`thaw_replication`](ReplicatedPostgres::thaw_replication), so a failover meanwhile
/// loses what the primary committed since. [`fail_over`](ReplicatedPostgres::fail_over) stops the
/// primary as a crash would and promotes the standby. Applications use [`url`](Self::url), which
/// names both servers with `target_session_attrs=read-write`, as they would in production.
///
/// Both servers run as [`TempPostgres`](super::TempPostgres) servers do (same user, `fsync = off`,
/// each in a `pgtenure-*` directory of its own under a supervising process), and both are stopped
/// and their directories deleted when this is dropped or the process exits, even by `SIGKILL`.
/// The standby's configuration leaves `synchronous_standby_names` empty, so once promoted it
/// accepts commits alone, as a failover tool would reconfigure it.
///
/// ```no_run
/// # fn main() -> Result<(), pgtenure::Error> {
/// use pgtenure::testing::{ReplicatedPostgres, Replication};
///
/// let pg = ReplicatedPostgres::start(Replication::Synchronous)?;
/// let db = pgtenure::Db::connect(pg.url())?;
/// pgtenure::migrate(&db)?;
/// let outage = pg.fail_over()?;
/// println!("writes were impossible for {outage:?}");
/// # Ok(())
/// # }
/// ```
pub struct ReplicatedPostgres {
    replication: Replication,
    primary_url: String,
    standby_url: String,
    url: String,
    failed_over: AtomicBool,
    // Dropped in this order: the forwarder's threads are joined, then the servers stopped.
    forwarder: Forwarder,
    primary: Supervised,
    standby: Supervised,
}

impl ReplicatedPostgres {
    /// Starts a primary and its standby (see the [type docs](ReplicatedPostgres)); blocks up to
    /// about a minute per attempt, three attempts at most (another process may take a chosen
    /// port).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when the server binaries are missing (the
    /// message names the package), `initdb` or `pg_basebackup` fails, a server does not start
    /// (its log is quoted), or the standby does not stream within a minute.
    pub fn start(replication: Replication) -> Result<ReplicatedPostgres> {
        let bindir = find_bindir()?;
        let run_as = run_as()?;
        retry_start(|| ReplicatedPostgres::start_once(&bindir, run_as, replication))
    }

    fn start_once(
        bindir: &Path,
        run_as: Option<RunAs>,
        replication: Replication,
    ) -> Result<ReplicatedPostgres> {
        let primary_dir = make_dir(run_as)?;
        if let Err(e) = initdb(bindir, &primary_dir, run_as) {
            let _ = fs::remove_dir_all(&primary_dir);
            return Err(e);
        }
        let primary_port = free_port()?;
        let mut extra: Vec<String> = Vec::new();
        if replication == Replication::Synchronous {
            // On the command line, not in postgresql.conf: pg_basebackup copies that file to the
            // standby, which must not wait for a standby of its own once promoted.
            for setting in [
                format!("synchronous_standby_names={STANDBY_NAME}"),
                "synchronous_commit=on".to_owned(),
            ] {
                extra.push("-c".to_owned());
                extra.push(setting);
            }
        }
        let primary = spawn(
            "primary PostgreSQL server",
            bindir,
            primary_dir,
            primary_port,
            &extra,
            run_as,
        )?;
        let primary_url = format!("postgres://postgres@127.0.0.1:{primary_port}/postgres");
        primary.wait_ready(&primary_url)?;

        let forwarder = Forwarder::start(primary_port)?;
        let standby_dir = make_dir(run_as)?;
        let standby_port = free_port()?;
        if let Err(e) = base_backup(bindir, &standby_dir, primary_port, forwarder.port, run_as) {
            let _ = fs::remove_dir_all(&standby_dir);
            return Err(e);
        }
        let standby = spawn(
            "standby PostgreSQL server",
            bindir,
            standby_dir,
            standby_port,
            &[],
            run_as,
        )?;
        let standby_url = format!("postgres://postgres@127.0.0.1:{standby_port}/postgres");
        standby.wait_ready(&standby_url)?;
        let pg = ReplicatedPostgres {
            replication,
            url: format!(
                "postgres://postgres@127.0.0.1:{primary_port},127.0.0.1:{standby_port}/postgres\
                 ?target_session_attrs=read-write"
            ),
            primary_url,
            standby_url,
            failed_over: AtomicBool::new(false),
            forwarder,
            primary,
            standby,
        };
        pg.wait_streaming()?;
        log::info!(
            target: "pgtenure::testing",
            "primary on port {primary_port}, {replication:?} standby on port {standby_port}"
        );
        Ok(pg)
    }

    /// Waits until the primary reports the standby streaming (and synchronous, in that mode).
    fn wait_streaming(&self) -> Result<()> {
        let want = match self.replication {
            Replication::Synchronous => "sync",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let state = connect(&self.primary_url)
                .and_then(|mut client| client.query_opt(STANDBY_STATE, &[&STANDBY_NAME]))
                .map_err(|e| e.to_string())
                .and_then(|row| {
                    row.map(|row| {
                        let read =
                            Columns::server(&row, "wait for the standby", &"pg_stat_replication");
                        Ok((
                            read.column::<String>("state")?,
                            read.column::<String>("sync_state")?,
                        ))
                    })
                    .transpose()
                    .map_err(|e: Error| e.to_string())
                });
            let last = match state {
                Ok(Some((state, sync))) if state == "streaming" && sync == want => return Ok(()),
                Ok(found) => format!("{found:?}"),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(self.standby.failure(&format!(
                    "the standby was not streaming ({want}) within {WAIT:?}; the primary's \
                     pg_stat_replication said {last}"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// How the standby replicates.
    pub fn replication(&self) -> Replication {
        self.replication
    }

    /// The primary alone (`postgres` superuser, trust auth). Dead after
    /// [`fail_over`](Self::fail_over).
    pub fn primary_url(&self) -> &str {
        &self.primary_url
    }

    /// The standby alone: read-only until [`fail_over`](Self::fail_over) promotes it.
    pub fn standby_url(&self) -> &str {
        &self.standby_url
    }

    /// The URL for the application: both servers, primary first, with
    /// `target_session_attrs=read-write`, so a new connection reaches whichever accepts writes.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops forwarding replication traffic: once it returns, the standby receives no more WAL, and
    /// the primary hears nothing from it, until [`thaw_replication`](Self::thaw_replication). In
    /// [`Replication::Synchronous`] mode every commit on the primary then waits.
    pub fn freeze_replication(&self) {
        self.forwarder.freeze();
        log::info!(target: "pgtenure::testing", "replication frozen");
    }

    /// Forwards replication traffic again (see
    /// [`freeze_replication`](Self::freeze_replication)).
    pub fn thaw_replication(&self) {
        self.forwarder.thaw();
        log::info!(target: "pgtenure::testing", "replication thawed");
    }

    /// Bytes of WAL the primary has written and the standby has not received yet: the most a
    /// failover now could lose. Two short connections, one to each server.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when a server cannot be reached (after
    /// [`fail_over`](Self::fail_over), the old primary cannot).
    pub fn replication_lag(&self) -> Result<u64> {
        let context = "ask the standby its WAL position";
        let row = connect(&self.standby_url)
            .and_then(|mut c| c.query_one(RECEIVED_LSN, &[]))
            .map_err(|e| Error::setup(format!("could not {context}")).with_source(e))?;
        let received: Option<String> =
            Columns::server(&row, context, &"pg_last_wal_receive_lsn()").at(0)?;
        let received = received.unwrap_or_else(|| "0/0".to_owned());
        let context = "ask the primary its WAL position";
        let row = connect(&self.primary_url)
            .and_then(|mut c| c.query_one(LAG, &[&received]))
            .map_err(|e| Error::setup(format!("could not {context}")).with_source(e))?;
        let lag: f64 = Columns::server(&row, context, &"pg_wal_lsn_diff()").at(0)?;
        Ok(lag as u64)
    }

    /// Fails over: stops the primary as `pg_ctl stop -m immediate` does (a crash: sessions are cut,
    /// nothing is flushed or sent any more), promotes the standby (`pg_promote`), and waits until a
    /// new connection through [`url`](Self::url) can write. Returns how long writes were
    /// impossible: from the primary's stop to that first write. Blocks up to a minute.
    ///
    /// Replication is not thawed: in asynchronous mode, what the standby had not received when
    /// the primary stopped is lost, as it would be with a real crash.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when it already failed over, the primary's
    /// supervisor does not answer, the standby refuses the promotion, or no write succeeds within a
    /// minute.
    pub fn fail_over(&self) -> Result<Duration> {
        self.fail_over_after(Duration::ZERO)
    }

    /// As [`fail_over`](Self::fail_over), with the promotion `downtime` after the primary's stop:
    /// a failover that takes as long as a real one (its tool's detection, fencing and promotion),
    /// for tests of what an outage longer than a TTL does. Returns how long writes were
    /// impossible, the downtime included.
    ///
    /// # Errors
    ///
    /// As [`fail_over`](Self::fail_over).
    pub fn fail_over_after(&self, downtime: Duration) -> Result<Duration> {
        if self.failed_over.swap(true, Ordering::SeqCst) {
            return Err(Error::setup(
                "this ReplicatedPostgres already failed over; it has no standby left",
            ));
        }
        let stopped = Instant::now();
        self.primary.send("crash")?;
        self.primary.expect_reply("crashed")?;
        std::thread::sleep(downtime);
        let row = connect(&self.standby_url)
            .and_then(|mut c| c.query_one(PROMOTE, &[]))
            .map_err(|e| {
                self.standby
                    .failure("the standby could not be promoted")
                    .with_source(e)
            })?;
        let promoted: bool = Columns::server(&row, "promote the standby", &"pg_promote()").at(0)?;
        if !promoted {
            return Err(self
                .standby
                .failure("the standby was not promoted within 60 s"));
        }
        let deadline = stopped + downtime + WAIT;
        loop {
            let write = connect(&self.url)
                .and_then(|mut c| c.simple_query("SELECT pg_current_xact_id()").map(drop));
            match write {
                Ok(()) => break,
                Err(e) if Instant::now() >= deadline => {
                    return Err(self
                        .standby
                        .failure("the promoted standby accepted no write within a minute")
                        .with_source(e));
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
        let outage = stopped.elapsed();
        log::info!(target: "pgtenure::testing", "failed over; writes were impossible for {outage:?}");
        Ok(outage)
    }

    /// The primary's directory (data, socket and `server.log`), deleted when stopped.
    pub fn primary_dir(&self) -> &Path {
        self.primary.dir()
    }

    /// The standby's directory (data, socket and `server.log`), deleted when stopped.
    pub fn standby_dir(&self) -> &Path {
        self.standby.dir()
    }

    /// Whether [`fail_over`](Self::fail_over) ran.
    pub fn has_failed_over(&self) -> bool {
        self.failed_over.load(Ordering::SeqCst)
    }

    /// Stops both servers and the forwarder and deletes the directories, waiting up to 30 s per
    /// server; the forwarder's threads are joined first, within about half a second (a write they
    /// are blocked in times out after 500 ms). Dropping does the same and logs what fails.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Setup`](crate::ErrorKind::Setup) when a supervisor did not finish in time (it
    /// and its server are then killed) or a directory is still there.
    pub fn stop(self) -> Result<()> {
        self.forwarder.stop();
        let primary = self.primary.shutdown();
        let standby = self.standby.shutdown();
        primary.and(standby)
    }
}

impl fmt::Debug for ReplicatedPostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedPostgres")
            .field("replication", &self.replication)
            .field("url", &self.url)
            .field("primary_dir", &self.primary.dir())
            .field("standby_dir", &self.standby.dir())
            .field("failed_over", &self.has_failed_over())
            .finish()
    }
}

/// Starts one server under [`SUPERVISOR`] in `dir` (which holds `data`).
fn spawn(
    what: &'static str,
    bindir: &Path,
    dir: std::path::PathBuf,
    port: u16,
    extra: &[String],
    run_as: Option<RunAs>,
) -> Result<Supervised> {
    let port_text = port.to_string();
    let mut args: Vec<&OsStr> = vec![bindir.as_os_str(), dir.as_os_str(), OsStr::new(&port_text)];
    args.extend(extra.iter().map(OsStr::new));
    Supervised::spawn(what, SUPERVISOR, &args, dir.clone(), port, run_as)
}

/// A driver connection with a short connect timeout, for the harness's own checks.
fn connect(url: &str) -> std::result::Result<postgres::Client, postgres::Error> {
    let mut config: postgres::Config = url.parse()?;
    config.connect_timeout(Duration::from_secs(2));
    config.connect(postgres::NoTls)
}

/// Copies the primary into `dir/data` with `pg_basebackup -R` and points the standby's replication
/// connection at the forwarder, under the standby's `application_name`.
fn base_backup(
    bindir: &Path,
    dir: &Path,
    primary_port: u16,
    forwarder_port: u16,
    run_as: Option<RunAs>,
) -> Result<()> {
    let data = dir.join("data");
    let mut command = Command::new(bindir.join("pg_basebackup"));
    command
        .arg("-D")
        .arg(&data)
        .args(["-h", "127.0.0.1", "-p", &primary_port.to_string()])
        .args([
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "-C",
            "-S",
            STANDBY_NAME,
        ])
        .args(["--checkpoint=fast", "--no-sync"])
        .current_dir(dir)
        .stdin(Stdio::null());
    if let Some(user) = run_as {
        command.uid(user.uid).gid(user.gid);
    }
    let out = command.output().map_err(|e| {
        Error::setup(format!("could not run {}/pg_basebackup", bindir.display())).with_source(e)
    })?;
    if !out.status.success() {
        return Err(Error::setup(format!(
            "pg_basebackup failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    // Later lines win: replicate through the forwarder, as the name synchronous mode waits for.
    let auto = data.join("postgresql.auto.conf");
    let lines = format!(
        "\nprimary_conninfo = 'host=127.0.0.1 port={forwarder_port} user=postgres \
         application_name={STANDBY_NAME}'\nprimary_slot_name = '{STANDBY_NAME}'\n"
    );
    fs::OpenOptions::new()
        .append(true)
        .open(&auto)
        .and_then(|mut file| file.write_all(lines.as_bytes()))
        .map_err(|e| Error::setup(format!("could not write {}", auto.display())).with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<ReplicatedPostgres>();
    }
}
