//! CMD's tree: CMD and every process it started, however far they went.
//!
//! A daemonizing command (`setsid -f worker`, a double fork) leaves CMD's process group, and its
//! parent, and would outlive the lease. So pgtenure makes itself the *subreaper* of CMD's tree
//! before it spawns CMD (Linux `PR_SET_CHILD_SUBREAPER`): a descendant whose parent exits is given
//! to pgtenure, not to init, and a process of the tree can no longer leave it, whatever it does
//! with its session or group. The tree is then what `/proc` shows: the processes whose parent chain
//! leads to pgtenure, and CMD's process group. [`scan`] reads it, [`Proc::signal`] signals one of
//! its processes (through a pidfd, never a process that reused a pid), and [`reap_orphans`] reaps
//! the orphans that exited (pgtenure's children now), CMD excepted: CMD is reaped only by
//! [`super::child::Cmd`], once its whole tree is gone.
//!
//! On other systems there is no subreaper and no `/proc`: the tree is CMD's process group.

use std::io;

/// Makes pgtenure the reaper of the orphans of CMD's tree (`PR_SET_CHILD_SUBREAPER`): called before
/// CMD is spawned, so that no descendant can leave the tree before pgtenure reaps it. Not inherited
/// by CMD.
#[cfg(target_os = "linux")]
pub(super) fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; it changes an attribute of this process.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_CHILD_SUBREAPER,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
pub(super) fn become_subreaper() -> io::Result<()> {
    Ok(())
}

/// One process of CMD's tree, as a scan of `/proc` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Proc {
    pub(super) pid: libc::pid_t,
    ppid: libc::pid_t,
    pgid: libc::pid_t,
    /// The state letter (`R`, `S`, `D`, `T`, `Z`, ...).
    state: char,
    /// When it started, in clock ticks since boot: with the pid, who it is (pids are reused).
    start: u64,
}

impl Proc {
    /// Whether it still runs: a zombie has exited and only waits to be reaped.
    pub(super) fn runs(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }

    /// Whether it is in the process group `pgid`.
    pub(super) fn in_group(&self, pgid: libc::pid_t) -> bool {
        self.pgid == pgid
    }

    /// Reads `/proc/PID/stat`; `None` once the process is gone (or the line is not understood).
    fn read(pid: libc::pid_t) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Proc::parse(&stat)
    }

    /// Parses a `/proc/PID/stat` line: the command name in parentheses (which may hold anything,
    /// parentheses and spaces included) comes second, then the state, ppid, pgid, and starttime as
    /// the 22nd field.
    fn parse(stat: &str) -> Option<Proc> {
        let (pid, rest) = stat.split_once(" (")?;
        let (_, fields) = rest.rsplit_once(')')?;
        let fields: Vec<&str> = fields.split_whitespace().collect();
        Some(Proc {
            pid: pid.trim().parse().ok()?,
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            pgid: fields.get(2)?.parse().ok()?,
            start: fields.get(19)?.parse().ok()?,
        })
    }

    /// Sends `signal` to this process, unless it is gone: through a pidfd opened on its pid and
    /// checked against its start time, so that a process that reused the pid never gets it (a
    /// grandchild can be reaped by its own parent between the scan and the signal). `SIGCONT`
    /// follows any other signal than `SIGKILL`, as for CMD's group: a stopped process acts on it.
    /// Whether it was sent (`Err` when it was not allowed, e.g. for a process that changed its user
    /// ID).
    pub(super) fn signal(&self, signal: i32) -> io::Result<()> {
        send(self, signal)?;
        if signal != libc::SIGKILL {
            send(self, libc::SIGCONT)?;
        }
        Ok(())
    }
}

/// Sends `signal` to `p` through a pidfd: `Ok` also when the process is gone. Kernels before 5.3
/// have no pidfd: there the start time is checked just before `kill`, a narrower race.
#[cfg(target_os = "linux")]
fn send(p: &Proc, signal: i32) -> io::Result<()> {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid, 0) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Ok(()),
            Some(libc::ENOSYS) => {
                if Proc::read(p.pid).is_some_and(|now| now.start == p.start) {
                    // SAFETY: kill has no memory effects.
                    if unsafe { libc::kill(p.pid, signal) } != 0 {
                        return gone_is_fine(io::Error::last_os_error());
                    }
                }
                Ok(())
            }
            _ => Err(e),
        };
    }
    // SAFETY: fd is a descriptor pidfd_open just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    // The pidfd names the process that had the pid when it was opened: if that one is the one the
    // scan saw, the signal can reach no other.
    if Proc::read(p.pid).is_none_or(|now| now.start != p.start) {
        return Ok(());
    }
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal with a valid pidfd, a null siginfo and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r != 0 {
        return gone_is_fine(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn send(_: &Proc, _: i32) -> io::Result<()> {
    Ok(())
}

/// `Ok` when the process is gone (`ESRCH`), the error otherwise.
#[cfg(target_os = "linux")]
fn gone_is_fine(e: io::Error) -> io::Result<()> {
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// CMD, as the scans know it: its pid (also its process group's id) and start time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Root {
    pub(super) cmd: libc::pid_t,
    /// CMD's start time (clock ticks since boot); 0 when it could not be read.
    cmd_start: u64,
}

impl Root {
    /// CMD just spawned (not reaped: its `/proc` entry exists).
    pub(super) fn new(cmd: libc::pid_t) -> Root {
        Root {
            cmd,
            cmd_start: Proc::read(cmd).map_or(0, |p| p.start),
        }
    }
}

/// CMD's tree as `/proc` shows it now: every process whose parent chain leads to pgtenure (CMD,
/// its descendants, the orphans they left, which are pgtenure's children now), zombies included,
/// and the members of CMD's process group. A child of pgtenure that started before CMD is not
/// CMD's: a process `exec`ing pgtenure can leave children of its own to it.
///
/// A snapshot: a process can fork while it is read. Whoever stops the tree scans again until a
/// scan finds nothing running; a process killed cannot fork any more, so that ends.
#[cfg(target_os = "linux")]
pub(super) fn scan(root: &Root) -> Vec<Proc> {
    let me = std::process::id() as libc::pid_t;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<Proc> = dir
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(Proc::read)
        .collect();
    let mut tree: Vec<Proc> = all
        .iter()
        .filter(|p| p.ppid == me && (p.pid == root.cmd || p.start >= root.cmd_start))
        .copied()
        .collect();
    let mut next = 0;
    while next < tree.len() {
        let parent = tree[next].pid;
        tree.extend(all.iter().filter(|p| p.ppid == parent && p.pid != me));
        next += 1;
    }
    for p in &all {
        if p.pgid == root.cmd && !tree.iter().any(|t| t.pid == p.pid) {
            tree.push(*p);
        }
    }
    tree
}

#[cfg(not(target_os = "linux"))]
pub(super) fn scan(_: &Root) -> Vec<Proc> {
    Vec::new()
}

/// Reaps the orphans of CMD's tree that exited (zombie children of pgtenure), CMD excepted. Only
/// the thread that reaps for pgtenure at that time may call this (see [`super::child::Cmd`]).
pub(super) fn reap_orphans(root: &Root, tree: &[Proc]) {
    let me = std::process::id() as libc::pid_t;
    for p in tree {
        if p.ppid == me && p.pid != root.cmd && !p.runs() {
            // SAFETY: waitpid on a child of ours that is not CMD: nothing else waits for it.
            unsafe {
                libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Proc;

    #[test]
    fn a_stat_line_is_read_whatever_the_command_name_holds() {
        let stat = "4242 (a) b (c) 9) S 17 4242 4242 0 -1 4194560 91 0 0 0 0 0 0 0 20 0 1 0 \
                    123456 2445312 227 18446744073709551615 1 1 0 0 0 0 0 0 65536 0 0 0 17 1 0 0";
        assert_eq!(
            Proc::parse(stat),
            Some(Proc {
                pid: 4242,
                ppid: 17,
                pgid: 4242,
                state: 'S',
                start: 123456,
            })
        );
        let zombie = "7 (sh) Z 1 7 7 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0";
        assert!(!Proc::parse(zombie).unwrap().runs());
        assert_eq!(Proc::parse("7 (sh) S 1"), None);
        assert_eq!(Proc::parse(""), None);
    }
}
