//! CMD, the child lease-run starts: its process group, the parent-death signal, waiting for its
//! exit without reaping it, stopping its whole tree, and its exit status.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use pgtenure::crossbeam_channel::{bounded, never, select, Receiver};
use pgtenure::leases::LeaseLoss;

use super::tree::{self, Proc, Root};
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

/// The exit status for a signal: 128 + its number.
pub(super) fn signal_status(signal: i32) -> u8 {
    128u8.saturating_add(signal as u8)
}

/// How often a stop looks again whether CMD's tree still runs: its descendants other than CMD are
/// not pgtenure's children until their parent exits, and no event says when they exit. At least
/// four times as long as a scan took, so that scans of a host with many processes (15 to 40 ms for
/// 1,000 on two busy cores: the kernel writing each `/proc/PID/stat`) take at most a fifth of a
/// core.
const POLL: Duration = Duration::from_millis(20);

/// How CMD's tree comes to be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// CMD exited by itself (or on a signal pgtenure passed on) while the lease was held.
    Exited,
    /// The lease was lost, and the tree has had SIGTERM.
    Lost,
}

/// CMD and its tree. CMD leads its own process group (its pid is the group's id); the rest of the
/// tree is found in `/proc` (see [`super::tree`]). Killed with its tree on drop unless reaped.
///
/// Two rules keep pids from naming the wrong process:
/// - CMD is reaped only by [`Cmd::reap`], once its whole tree is gone, so until then neither its pid
///   nor its group id can name another process: every signal to the group reaches CMD's.
/// - One thread at a time reaps for pgtenure: the waiter thread while CMD runs (the orphans of the
///   tree exit as pgtenure's children, and would pile up as zombies), the main thread once the
///   waiter has ended. Neither ever reaps CMD but through [`Cmd::reap`].
#[derive(Debug)]
pub(super) struct Cmd {
    child: Child,
    pub(super) pid: libc::pid_t,
    root: Root,
    reaped: bool,
    /// The waiter thread until it has ended and was joined.
    waiter: Option<JoinHandle<()>>,
    /// The waiter's word that CMD exited (disconnected once it has ended).
    exited: Receiver<()>,
    /// The processes of the tree that pgtenure was not allowed to signal, already said.
    refused: Vec<libc::pid_t>,
    /// The loss seen while [`Cmd::stop`] ended what an exited CMD left running (why).
    pub(super) lost_while_stopping: Option<String>,
}

impl Cmd {
    /// CMD just spawned (pgtenure being the tree's subreaper already).
    pub(super) fn new(child: Child) -> Cmd {
        let pid = child.id() as libc::pid_t;
        Cmd {
            child,
            pid,
            root: Root::new(pid),
            reaped: false,
            waiter: None,
            exited: never(),
            refused: Vec::new(),
            lost_while_stopping: None,
        }
    }

    /// Sends `signal` to CMD's tree: to CMD's process group first (CMD, and whatever it started that
    /// stayed in its group), then to every other process of the tree; `SIGCONT` after any other
    /// signal than `SIGKILL`, as a shell does for a stopped job: a process stopped by SIGSTOP, or by
    /// SIGTTIN reading the terminal from its background group, acts on the signal at once.
    pub(super) fn signal_tree(&mut self, signal: i32) {
        if self.reaped {
            return;
        }
        self.signal_group(signal);
        let tree = tree::scan(&self.root);
        self.signal_each(tree.iter(), signal);
    }

    /// Sends `signal` (then `SIGCONT`, but after `SIGKILL`) to CMD's process group.
    fn signal_group(&self, signal: i32) {
        if self.reaped {
            return;
        }
        // SAFETY: kill has no memory effects; the group's leader is our unreaped child.
        unsafe {
            libc::kill(-self.pid, signal);
            if signal != libc::SIGKILL {
                libc::kill(-self.pid, libc::SIGCONT);
            }
        }
    }

    /// Sends `signal` (then `SIGCONT`, but after `SIGKILL`) to each running process of `procs` but
    /// CMD and its group's members, which [`Cmd::signal_group`] reaches; says which processes it was
    /// not allowed to signal, once each.
    fn signal_each<'a>(&mut self, procs: impl Iterator<Item = &'a Proc>, signal: i32) {
        for p in procs {
            if p.in_group(self.pid) || !p.runs() {
                continue;
            }
            if let Err(e) = p.signal(signal) {
                if !self.refused.contains(&p.pid) {
                    self.refused.push(p.pid);
                    say!(
                        "pgtenure: cannot signal process {} that CMD started ({e}); the lease is kept \
                         until it exits",
                        p.pid
                    );
                }
            }
        }
    }

    /// Starts the waiter thread, which waits until CMD exits without reaping it (`waitid` with
    /// `WNOWAIT`) and says so on the returned channel, so that the main thread can select on it
    /// beside the lease's loss channel; its signals keep reaching CMD, never a process that reused
    /// its pid. Meanwhile it reaps the orphans of CMD's tree that exit (pgtenure is their subreaper).
    pub(super) fn watch_exit(&mut self) -> io::Result<Receiver<()>> {
        let (tx, rx) = bounded(1);
        let cmd = self.pid;
        let waiter = thread::Builder::new()
            .name("pgtenure-wait-cmd".into())
            .spawn(move || {
                loop {
                    // SAFETY: a zeroed siginfo_t is a valid out-parameter for waitid.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: info is a valid, writable siginfo_t.
                    let r = unsafe {
                        libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT)
                    };
                    if r != 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        say!("pgtenure: waiting for CMD failed ({e}); stopping it");
                        break;
                    }
                    // SAFETY: waitid filled info for a child that exited.
                    let pid = unsafe { info.si_pid() };
                    if pid == cmd {
                        break;
                    }
                    // An orphan of CMD's tree that exited: a zombie child of ours, not CMD.
                    // SAFETY: waitpid on that child; this thread is the only one reaping now.
                    unsafe {
                        libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG);
                    }
                }
                let _ = tx.send(());
            })?;
        self.waiter = Some(waiter);
        self.exited = rx.clone();
        Ok(rx)
    }

    /// Whether the waiter thread has ended (or never started): this thread reaps from then on.
    fn waiter_ended(&mut self) -> bool {
        if self.waiter.as_ref().is_some_and(|w| !w.is_finished()) {
            return false;
        }
        if let Some(waiter) = self.waiter.take() {
            // It has finished: the join returns at once.
            let _ = waiter.join();
        }
        true
    }

    /// Ends CMD's tree, once CMD has exited ([`Ending::Exited`]: what it left running gets SIGTERM
    /// here) or after a loss ([`Ending::Lost`]: the caller has sent the tree SIGTERM): waits up to
    /// `grace` for every process of the tree to exit, passing on the `signals` pgtenure gets
    /// meanwhile, then sends SIGKILL to whatever runs on, scanning again until nothing does. After a
    /// loss, the rest of the tree gets SIGKILL as soon as CMD has exited (no tenure is left to
    /// finish in), and so it does when the lease is lost (`loss`) during an [`Ending::Exited`]
    /// stop: the loss is kept in [`Cmd::lost_while_stopping`]. Reaps the tree's orphans, and CMD
    /// last: CMD's status (`None` if waiting failed).
    ///
    /// A process that cannot be killed (one that changed its user ID, one in an uninterruptible
    /// sleep) keeps this waiting: nothing of CMD's may run on after the lease.
    pub(super) fn stop(
        &mut self,
        grace: Duration,
        signals: Option<&Receiver<i32>>,
        loss: Option<&Receiver<LeaseLoss>>,
        ending: Ending,
    ) -> Option<ExitStatus> {
        let deadline = Instant::now().checked_add(grace);
        let signals = signals.cloned().unwrap_or_else(never);
        let mut lost = ending == Ending::Lost;
        let mut loss = match (lost, loss) {
            (false, Some(loss)) => loss.clone(),
            _ => never(),
        };
        let mut termed = lost;
        let mut killed = false;
        let mut empty_once = false;
        loop {
            let reaping = self.waiter_ended();
            let scanning = Instant::now();
            let tree = tree::scan(&self.root);
            let poll = POLL.max(scanning.elapsed() * 4);
            if reaping {
                tree::reap_orphans(&self.root, &tree);
            }
            let running: Vec<&Proc> = tree.iter().filter(|p| p.runs()).collect();
            if running.is_empty() && reaping {
                // Twice in a row: a scan can miss a process whose parent and grandparent both
                // exited while it read /proc (reparented to pgtenure meanwhile, it is pgtenure's
                // child by the next scan, which nothing else can reap).
                if empty_once {
                    break;
                }
                empty_once = true;
                continue;
            }
            empty_once = false;
            if !termed {
                termed = self.term_leftovers(&running, grace);
            }
            let late = deadline.is_some_and(|d| Instant::now() >= d);
            if !killed && (late || (lost && reaping)) {
                killed = true;
                self.kill_running(&running, late, grace);
            } else if killed {
                // What forked while it was killed.
                self.signal_group(libc::SIGKILL);
                self.signal_each(running.iter().copied(), libc::SIGKILL);
            }
            let exited = match self.waiter {
                Some(_) => self.exited.clone(),
                None => never(),
            };
            select! {
                recv(exited) -> _ => {}
                recv(signals) -> signal => {
                    if let (Ok(signal), false) = (signal, killed) {
                        self.signal_tree(signal);
                    }
                }
                recv(loss) -> reason => {
                    // CMD has exited: what it left gets SIGKILL at the next turn, at once, as
                    // after a loss while CMD runs; no tenure is left for its grace period.
                    loss = never();
                    lost = true;
                    let reason = reason.map_or_else(
                        |_| "its renewal stopped".to_owned(),
                        |reason| reason.to_string(),
                    );
                    say!(
                        "pgtenure: lease lost ({reason}) while what CMD left ran; stopping it \
                         with SIGKILL"
                    );
                    self.lost_while_stopping = Some(reason);
                }
                default(poll) => {}
            }
        }
        self.reap()
    }

    /// After CMD exited: sends SIGTERM to what it left `running` (its group, and each process of
    /// its tree), saying so; whether anything was left.
    fn term_leftovers(&mut self, running: &[&Proc], grace: Duration) -> bool {
        let others: Vec<&Proc> = running
            .iter()
            .copied()
            .filter(|p| p.pid != self.pid)
            .collect();
        if others.is_empty() {
            return false;
        }
        self.signal_group(libc::SIGTERM);
        self.signal_each(others.iter().copied(), libc::SIGTERM);
        let pids: Vec<String> = others.iter().map(|p| p.pid.to_string()).collect();
        say!(
            "pgtenure: CMD exited, leaving {} process(es) it started (pid {}); \
             stopping them with SIGTERM, SIGKILL after {grace:?}, before the lease is \
             released",
            others.len(),
            pids.join(", ")
        );
        true
    }

    /// Sends SIGKILL to CMD's group and to each process of its tree still `running`, saying so
    /// when the grace period ran out (`late`).
    fn kill_running(&mut self, running: &[&Proc], late: bool, grace: Duration) {
        self.signal_group(libc::SIGKILL);
        self.signal_each(running.iter().copied(), libc::SIGKILL);
        let cmd_runs = running.iter().any(|p| p.pid == self.pid);
        let others = running.len() - usize::from(cmd_runs);
        if late && cmd_runs {
            say!("pgtenure: CMD did not exit within {grace:?} of SIGTERM; sent SIGKILL");
        } else if late {
            say!(
                "pgtenure: {others} process(es) that CMD started did not exit within \
                 {grace:?} of SIGTERM; sent SIGKILL"
            );
        }
    }

    /// Waits for CMD and reaps it: its status, `None` if waiting failed.
    fn reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.wait().ok();
        self.reaped = true;
        status
    }

    /// SIGKILL to CMD's whole tree, then reaps it: for the paths that cannot wait (an error, a
    /// panic).
    pub(super) fn kill_tree(&mut self) {
        if !self.reaped {
            self.signal_tree(libc::SIGKILL);
            self.stop(Duration::ZERO, None, None, Ending::Lost);
        }
    }
}

/// Kills CMD's tree unless it was reaped. It returns once nothing of the tree runs, as the lease
/// must not be released before (it is dropped after this): at once, but for a process SIGKILL
/// cannot end (an uninterruptible sleep), which holds it, as it would hold any wait for CMD.
impl Drop for Cmd {
    fn drop(&mut self) {
        self.kill_tree();
    }
}
