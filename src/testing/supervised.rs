//! A server process watched by a supervising shell that cleans up when its owner goes away.
//!
//! The shell reads commands from a pipe this process holds. When the pipe closes (the handle was
//! dropped, or this process exited in any way, `SIGKILL` included) the shell stops the server and
//! deletes its directory. It answers each start with `started <pid>`, so a server that outlives a
//! hung shell can still be killed by pid.
//!
//! Deleting is tried again for a while when it fails (a process of the server that outlived it, or
//! anything else still writing in the directory, makes `rm -rf` fail with "Directory not empty"),
//! by the supervisor after the script's end and by [`Supervised::shutdown`] after the supervisor's.
//!
//! When this process runs as root, the server and its supervisor run as an unprivileged user, who
//! may not delete the directory itself: a private `TMPDIR` (mode 0755, owned by root, as CI runners
//! and containers make it) lets only root delete entries in it. A second shell, the reaper, then
//! runs as root beside the supervisor on a pipe of its own: when that pipe closes it waits for the
//! supervisor to end and deletes the directory, so nothing is left behind however this process
//! exits.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::RunAs;
use crate::error::{Error, Result};

/// How long a new server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long stopping waits for the supervisor to stop the server and delete its files.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a directory that could not be deleted at once is tried again (a server's last
/// processes exit within seconds of the postmaster's death).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every supervisor runs after its script (which has stopped the server): deletes `$dir`,
/// again every quarter second for up to 10 s while something still writes in it. A user who may
/// not write in its parent (the server's user in a private `TMPDIR` as root) stops once it has
/// emptied it: only the reaper, as root, can delete it, and it waits for this shell to end.
const REMOVE_DIR: &str = r#"
tries=0
parent=$(dirname -- "$dir")
while [ -e "$dir" ] && [ "$tries" -lt 40 ]; do
    rm -rf "$dir" 2>/dev/null && break
    if [ ! -w "$parent" ] && [ -z "$(ls -A "$dir" 2>/dev/null)" ]; then break; fi
    sleep 0.25
    tries=$((tries + 1))
done
"#;

/// The reaper, run as root when the supervisor runs as another user: on end of input it waits for
/// the supervisor (pid `$1`) to end, up to 60 s, then deletes `$dir` (`$2`) as [`REMOVE_DIR`] does.
const REAPER: &str = r#"
sup=$1; dir=$2
while read -r _; do :; done
tries=0
while kill -0 "$sup" 2>/dev/null && [ "$tries" -lt 240 ]; do
    sleep 0.25
    tries=$((tries + 1))
done
"#;

struct Control {
    supervisor: Child,
    /// The root reaper, when the supervisor runs as another user (its stdin is its pipe).
    reaper: Option<Child>,
    commands: Option<ChildStdin>,
    replies: BufReader<ChildStdout>,
    /// The server's pid, from the last `started` answer.
    pid: Option<u32>,
}

pub(super) struct Supervised {
    what: &'static str,
    port: u16,
    dir: PathBuf,
    control: Mutex<Control>,
}

impl Supervised {
    /// Starts `script` under `/bin/sh` with `args`, in `dir`, as `run_as`, and waits for `started`.
    /// The script sets `$dir` to `dir` and ends once its server is stopped; the directory is then
    /// deleted. It is also deleted when this fails.
    pub(super) fn spawn(
        what: &'static str,
        script: &str,
        args: &[&OsStr],
        dir: PathBuf,
        port: u16,
        run_as: Option<RunAs>,
    ) -> Result<Supervised> {
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(format!("{script}{REMOVE_DIR}"))
            .arg("pgtenure-supervisor")
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Its own process group: a terminal's Ctrl-C must not kill it before it cleans up.
            .process_group(0);
        if let Some(user) = run_as {
            command.uid(user.uid).gid(user.gid);
        }
        let mut supervisor = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(
                    Error::setup("could not start the supervising shell /bin/sh").with_source(e),
                );
            }
        };
        let reaper = match run_as {
            Some(_) => match spawn_reaper(supervisor.id(), &dir) {
                Ok(reaper) => Some(reaper),
                Err(e) => {
                    // Closing its pipe stops the supervisor, which stops the server.
                    drop(supervisor.stdin.take());
                    let _ = supervisor.wait();
                    let _ = remove_dir(&dir);
                    return Err(
                        Error::setup("could not start the reaping shell /bin/sh").with_source(e)
                    );
                }
            },
            None => None,
        };
        let commands = supervisor.stdin.take();
        let replies = BufReader::new(supervisor.stdout.take().expect("stdout is piped"));
        let supervised = Supervised {
            what,
            port,
            dir,
            control: Mutex::new(Control {
                supervisor,
                reaper,
                commands,
                replies,
                pid: None,
            }),
        };
        // From here on, dropping it stops the server and deletes the directory.
        supervised.expect_reply("started")?;
        Ok(supervised)
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn send(&self, command: &str) -> Result<()> {
        let mut control = self.control.lock();
        let pipe = control
            .commands
            .as_mut()
            .ok_or_else(|| Error::setup(format!("the temporary {} was stopped", self.what)))?;
        writeln!(pipe, "{command}")
            .and_then(|()| pipe.flush())
            .map_err(|e| {
                Error::setup(format!("the temporary {}'s supervisor is gone", self.what))
                    .with_source(e)
            })
    }

    pub(super) fn expect_reply(&self, word: &str) -> Result<()> {
        let mut control = self.control.lock();
        let mut line = String::new();
        match control.replies.read_line(&mut line) {
            Ok(n) if n > 0 && line.starts_with(word) => {
                if let Some(pid) = line.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                    control.pid = Some(pid);
                }
                Ok(())
            }
            Ok(_) => {
                drop(control);
                Err(self.failure(&format!(
                    "the supervisor did not answer {word:?} (said {line:?})"
                )))
            }
            Err(e) => {
                drop(control);
                Err(self
                    .failure("the supervisor could not be read")
                    .with_source(e))
            }
        }
    }

    fn exited(&self) -> Option<ExitStatus> {
        self.control.lock().supervisor.try_wait().ok().flatten()
    }

    /// Waits until `url` accepts a connection and answers a query.
    pub(super) fn wait_ready(&self, url: &str) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut config = url
            .parse::<postgres::Config>()
            .expect("the URL is well formed");
        config.connect_timeout(Duration::from_secs(2));
        loop {
            let attempt = config
                .connect(postgres::NoTls)
                .and_then(|mut client| client.simple_query("SELECT 1").map(drop));
            match attempt {
                Ok(()) => return Ok(()),
                // The server answered, refusing this client (a pg_hba.conf of the test's own):
                // it is up, unless it said it is still starting.
                Err(e)
                    if e.as_db_error().is_some()
                        && e.code() != Some(&postgres::error::SqlState::CANNOT_CONNECT_NOW) =>
                {
                    return Ok(())
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(self
                        .failure("it did not accept connections in time")
                        .with_source(e));
                }
                Err(_) => {
                    if let Some(status) = self.exited() {
                        return Err(self.failure(&format!("the supervisor exited ({status})")));
                    }
                    std::thread::sleep(Duration::from_millis(25));
                }
            }
        }
    }

    /// Stops the server and deletes its directory, waiting up to 30 s; kills both after that.
    pub(super) fn shutdown(&self) -> Result<()> {
        let mut control = self.control.lock();
        // Closing the pipe is the stop signal.
        drop(control.commands.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match control.supervisor.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = control.supervisor.kill();
                    let _ = control.supervisor.wait();
                    if let Some(pid) = control.pid {
                        let _ = Command::new("kill")
                            .args(["-KILL", &pid.to_string()])
                            .status();
                    }
                    // Its other processes exit soon after it, and may write until then.
                    let _ = remove_dir(&self.dir);
                    if let Some(mut reaper) = control.reaper.take() {
                        drop(reaper.stdin.take());
                        let _ = reaper.wait();
                    }
                    return Err(Error::setup(format!(
                        "the temporary {} in {} did not stop within {STOP_TIMEOUT:?} and was killed",
                        self.what,
                        self.dir.display()
                    )));
                }
            }
        }
        // The supervisor gave up on the directory (or was killed before it got to it).
        let removed = remove_dir(&self.dir);
        // The reaper finds the supervisor gone (reaped above) and the directory too.
        if let Some(mut reaper) = control.reaper.take() {
            drop(reaper.stdin.take());
            let _ = reaper.wait();
        }
        removed.map_err(|e| {
            Error::setup(format!(
                "the temporary {}'s directory {} could not be deleted",
                self.what,
                self.dir.display()
            ))
            .with_source(e)
        })
    }

    /// A setup error that quotes the end of the server's log.
    pub(super) fn failure(&self, what: &str) -> Error {
        let log = fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Error::setup(format!(
            "temporary {} on port {}: {what}; its log: {}",
            self.what,
            self.port,
            if tail.is_empty() {
                "(empty)".to_owned()
            } else {
                tail.join(" | ")
            }
        ))
    }
}

/// Starts the [`REAPER`] for the supervisor `supervisor` and `dir`, as this process's user, in a
/// process group of its own (a terminal's Ctrl-C must not kill it before it cleans up).
fn spawn_reaper(supervisor: u32, dir: &Path) -> std::io::Result<Child> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{REAPER}{REMOVE_DIR}"))
        .arg("pgtenure-reaper")
        .arg(supervisor.to_string())
        .arg(dir)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
}

/// Deletes `dir` and what it holds, trying again for up to [`REMOVE_TIMEOUT`] while that fails
/// (something still writes in it). A directory already gone is deleted.
fn remove_dir(dir: &Path) -> std::io::Result<()> {
    let deadline = Instant::now() + REMOVE_TIMEOUT;
    loop {
        match fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            log::error!(target: "pgtenure::testing", "{e}");
        }
    }
}
