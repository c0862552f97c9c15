//! CMD, the child lease-run starts: its process group, the parent-death signal, waiting for its
//! exit without reaping it, and its exit status.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::thread;
use std::time::Duration;

use pgtenure::crossbeam_channel::{bounded, Receiver};

use super::signal_status;
use crate::EXIT_ERROR;

/// What the child does between `fork` and `exec`: it puts SIGTTOU back to its default (pgtenure
/// ignores it, and an ignored signal stays ignored across `exec`; SIGTSTP is caught, and a caught
/// signal is reset by `exec`), and asks for the parent-death signal.
pub(super) fn prepare_child(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child and calls only async-signal-safe functions
    // (signal, prctl, getppid, _exit); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            die_with_parent(parent)
        });
    }
}

/// Makes the kernel kill CMD (SIGKILL) when pgtenure dies, however it dies: Linux's
/// `PR_SET_PDEATHSIG`, called in the child between `fork` and `exec`.
///
/// The signal fires when the *thread* that forked exits: CMD is spawned from the main thread, which
/// lives as long as the process. pgtenure can die between `fork` and the `prctl`; then the child
/// has been reparented already and no signal will come, so the child compares its parent with the
/// pid recorded before the fork and exits instead of running CMD.
///
/// # Safety
///
/// Only in the child between `fork` and `exec`: it may end the process.
#[cfg(target_os = "linux")]
unsafe fn die_with_parent(parent: libc::pid_t) -> io::Result<()> {
    if libc::prctl(
        libc::PR_SET_PDEATHSIG,
        libc::SIGKILL as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    ) != 0
    {
        return Err(io::Error::last_os_error());
    }
    if libc::getppid() != parent {
        libc::_exit(libc::EXIT_FAILURE);
    }
    Ok(())
}

/// Elsewhere there is no parent-death signal: CMD still gets pgtenure's signals and is stopped on
/// a loss, but a `kill -9` of pgtenure leaves it running.
#[cfg(not(target_os = "linux"))]
unsafe fn die_with_parent(_: libc::pid_t) -> io::Result<()> {
    Ok(())
}

/// CMD's exit status as ours: its code, or 128 + the signal that ended it.
pub(super) fn exit_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => signal_status(signal),
        (None, None) => EXIT_ERROR,
    }
}

/// CMD, the leader of its own process group (its pid is the group's id), killed with its group on
/// drop unless it was reaped.
///
/// CMD is reaped only by [`Cmd::reap`], after its exit was seen (or after SIGKILL), so until then
/// neither its pid nor its group id can name another process: every signal reaches CMD's group.
#[derive(Debug)]
pub(super) struct Cmd {
    child: Child,
    pub(super) pid: libc::pid_t,
    reaped: bool,
}

impl Cmd {
    pub(super) fn new(child: Child) -> Cmd {
        let pid = child.id() as libc::pid_t;
        Cmd {
            child,
            pid,
            reaped: false,
        }
    }

    /// Sends `signal` to CMD's process group (CMD and whatever it started that stayed in its
    /// group), then SIGCONT, as a shell does for a stopped job: a CMD stopped by SIGSTOP, or by
    /// SIGTTIN reading the terminal from its background group, acts on the signal at once.
    pub(super) fn signal_group(&self, signal: i32) {
        if !self.reaped {
            // SAFETY: kill has no memory effects; the group's leader is our unreaped child.
            unsafe {
                libc::kill(-self.pid, signal);
                if signal != libc::SIGKILL {
                    libc::kill(-self.pid, libc::SIGCONT);
                }
            }
        }
    }

    /// Waits for CMD and reaps it: its status, `None` if waiting failed.
    pub(super) fn reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.wait().ok();
        self.reaped = true;
        status
    }

    /// SIGKILL to CMD's group, then reaps CMD.
    pub(super) fn kill_group(&mut self) {
        self.signal_group(libc::SIGKILL);
        self.reap();
    }

    /// After a loss and SIGTERM: waits up to `grace` for CMD to exit, then SIGKILL to its group
    /// (CMD itself if it is still running, and what it left in its group: none of it may run on
    /// without the lease); returns once CMD has been reaped.
    pub(super) fn stop(&mut self, exited: &Receiver<io::Result<()>>, grace: Duration) {
        let ignored = exited.recv_timeout(grace).is_err();
        self.kill_group();
        if ignored {
            say!("pgtenure: CMD did not exit within {grace:?} of SIGTERM; sent SIGKILL");
        }
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
        }
    }
}

/// A thread that waits until CMD exits without reaping it (`waitid` with `WNOWAIT`), and says so on
/// the returned channel: the main thread can select on it beside the lease's loss channel, and its
/// signals keep reaching CMD, never a process that reused its pid.
pub(super) fn watch_exit(pid: libc::pid_t) -> io::Result<Receiver<io::Result<()>>> {
    let (tx, rx) = bounded(1);
    thread::Builder::new()
        .name("pgtenure-wait-cmd".into())
        .spawn(move || {
            let result = loop {
                // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                // SAFETY: info is a valid, writable siginfo_t.
                let r = unsafe {
                    libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOWAIT,
                    )
                };
                if r == 0 {
                    break Ok(());
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    break Err(e);
                }
            };
            let _ = tx.send(result);
        })?;
    Ok(rx)
}
