//! `pgtenure lease-run KEY -- CMD ARGS...`: run a command only while holding a lease.
//!
//! The lease is a managed [`Lease`]: the library's renewal thread renews it every third of the TTL
//! while CMD runs, retrying a failed renewal (a killed connection, a restarting database) on a new
//! connection until the lease's local deadline. Only a loss stops CMD: the database refusing a
//! renewal (the key was force-released, or taken after a lapse) or the local deadline passing
//! without a renewal. Then CMD's process group gets SIGTERM, and SIGKILL after the grace period.
//!
//! CMD never outlives the lease, however `pgtenure` ends:
//! - CMD runs in a process group of its own, which gets the signals `pgtenure` is sent (SIGINT,
//!   SIGTERM, SIGHUP, SIGQUIT); `pgtenure` keeps the lease until CMD has exited, then releases it.
//! - CMD is killed (SIGKILL) by the kernel when `pgtenure` dies in any other way (`kill -9`, the OOM
//!   killer, a crash): Linux's parent-death signal, set in the child before `exec`. SIGKILL, not
//!   SIGTERM: nobody is left to renew the lease or to enforce the grace period, and a CMD that
//!   ignored SIGTERM would run on beside the key's next holder.
//! - A panic in `pgtenure` kills CMD's group before the lease is released (CMD's handle is dropped
//!   before the lease's).
//! - Nothing on these paths can panic on a write: messages go to stderr through `say!`, which
//!   ignores a failed write (a dead pipe), and only after CMD was signalled.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use pgtenure::crossbeam_channel::{bounded, select, Receiver};
use pgtenure::postgres::error::SqlState;
use pgtenure::{Lease, Leases, Refusal};

use crate::duration;
use crate::output::time;
use crate::Failure;

/// Exit status when the lease was not acquired within `--wait`: another holder has it
/// (EX_TEMPFAIL: try again later).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lease was lost while CMD ran, and CMD was stopped.
pub const EXIT_LOST: u8 = 76;
/// Exit status when CMD could not be found.
const EXIT_NOT_FOUND: u8 = 127;
/// Exit status when CMD could not be executed.
const EXIT_CANNOT_EXECUTE: u8 = 126;

/// The environment variable that carries the lease's key to CMD.
pub const ENV_KEY: &str = "PGTENURE_LEASE_KEY";
/// The environment variable that carries the lease's fencing token to CMD.
pub const ENV_TOKEN: &str = "PGTENURE_LEASE_TOKEN";

/// How often an acquire is tried again while `--wait` lasts.
const RETRY: Duration = Duration::from_millis(250);

pub const EXIT_HELP: &str = "\
CMD runs with PGTENURE_LEASE_KEY and PGTENURE_LEASE_TOKEN (the fencing token) in its environment.
The lease renews every third of --ttl while CMD runs; a failed renewal (a killed connection, a
restarting database) is retried until the lease's local deadline.
CMD never outlives the lease, however pgtenure ends. CMD runs in a process group of its own:
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pgtenure (a terminal's Ctrl-C included) are passed to
that group, and pgtenure keeps the lease until CMD exits. If pgtenure dies otherwise (kill -9, the
OOM killer, a crash), the kernel kills CMD at once with SIGKILL (Linux's parent-death signal; CMD
cannot clean up then, as nobody is left to renew the lease). That signal reaches CMD itself, not
the processes it starts: a shell wrapper should exec its last command. CMD is a background job to a
terminal: it cannot read from it, and Ctrl-Z does nothing. Give lease-run non-interactive commands.
A loss is the key force-released (pgtenure lease release --force), taken after a lapse, asked for
by a contender (Leases::supersede), or not renewed before the lease's local deadline. CMD can still
run for up to a third of --ttl before the loss is seen, and for --grace after it: fence CMD's own
writes with PGTENURE_LEASE_TOKEN where a second writer would do harm.

Exit status:
  CMD's own status     CMD ran and exited (128+N when a signal N ended it); the lease is released
  75                   the lease was not acquired within --wait (another holder has it)
  76                   the lease was lost while CMD ran (force-released, taken after a lapse, or not
                       renewed in time); CMD's group got SIGTERM, then SIGKILL once CMD exited or
                       after --grace
  126, 127             CMD could not be executed, or was not found
  1                    an error (said on stderr), e.g. the database could not be reached
  128+N                pgtenure got signal N while waiting for the lease (CMD never ran)
  2                    a usage error, found before connecting (a blank KEY, --ttl under 30ms, ...)

A signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) that comes while the acquire statement is on its way
(waiting on a row lock, or on a slow database) means CMD will not run: pgtenure says so at once,
waits for that statement to return, releases the lease if it was granted, and exits 128+N. A second
signal makes it exit at once; a lease granted after that lapses at its TTL. A signal that comes
after the lease was granted and before CMD started also runs no command.";

#[derive(Args, Debug)]
pub struct LeaseRunArgs {
    #[command(flatten)]
    listing: ListingFlags,
    /// The lease key.
    key: String,
    /// The lease's TTL: it renews every third of it, and a loss is noticed within it.
    #[arg(long, default_value = "30s", value_parser = duration::parse, allow_hyphen_values = true)]
    ttl: Duration,
    /// How long to keep trying while another holder has the key, e.g. 2m (0: try once).
    #[arg(long, default_value = "0", value_parser = duration::parse, allow_hyphen_values = true)]
    wait: Duration,
    /// Once the lease is lost: how long CMD has to exit after SIGTERM before it gets SIGKILL.
    #[arg(long, default_value = "10s", value_parser = duration::parse, allow_hyphen_values = true)]
    grace: Duration,
    /// The owner name written into the lease row. Defaults to "{hostname}-{pid}-{random hex}".
    #[arg(long)]
    owner: Option<String>,
    /// The command to run and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The listings' flags, which lease-run refuses: declared here, hidden, so that its help leaves
/// them out (a flag of the same name in a subcommand keeps the global one out of it).
#[derive(Args, Debug)]
struct ListingFlags {
    #[arg(long, hide = true)]
    json: bool,
    #[arg(short, long, hide = true, value_enum)]
    output: Option<crate::Output>,
    #[arg(short, long, hide = true)]
    watch: bool,
    #[arg(long, hide = true, value_parser = duration::parse)]
    interval: Option<Duration>,
    #[arg(long, hide = true)]
    leader_table: Option<String>,
    #[arg(long, hide = true)]
    ticks_table: Option<String>,
    #[arg(long, hide = true)]
    processes_table: Option<String>,
    #[arg(long, hide = true)]
    units_table: Option<String>,
}

impl ListingFlags {
    /// The first listing flag given, if any. The global flags' defaults reach these too, so a
    /// default value counts as not given.
    fn given(&self) -> Option<&'static str> {
        let not =
            |value: &Option<String>, default: &str| value.as_deref().is_some_and(|v| v != default);
        let flags = [
            (self.json, "--json"),
            (
                self.output.is_some_and(|o| o != crate::Output::Table),
                "--output",
            ),
            (self.watch, "--watch"),
            (
                self.interval.is_some_and(|i| i != crate::DEFAULT_INTERVAL),
                "--interval",
            ),
            (
                not(&self.leader_table, pgtenure::elector::DEFAULT_TABLE),
                "--leader-table",
            ),
            (
                not(&self.ticks_table, pgtenure::tick_claims::DEFAULT_TABLE),
                "--ticks-table",
            ),
            (
                not(
                    &self.processes_table,
                    pgtenure::membership::DEFAULT_PROCESSES_TABLE,
                ),
                "--processes-table",
            ),
            (
                not(&self.units_table, pgtenure::membership::DEFAULT_UNITS_TABLE),
                "--units-table",
            ),
        ];
        flags
            .into_iter()
            .find(|(set, _)| *set)
            .map(|(_, flag)| flag)
    }
}

impl LeaseRunArgs {
    /// The lease key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Checks the arguments before anything connects, with the library's own checks: the key (not
    /// blank, no NUL byte, at most 1,024 bytes), the TTL (30 ms to 100 years, a managed lease's) and
    /// the owner name. `--wait` and `--grace` (0 to 100 years) were bounded when parsed. The error
    /// says what is wrong and what is accepted; it is a usage error.
    pub fn check(&self) -> Result<(), String> {
        if let Some(flag) = self.listing.given() {
            return Err(format!(
                "{flag} is for listings; lease-run prints none (CMD's output is its own)"
            ));
        }
        pgtenure::leases::check_acquire(&self.key, self.ttl).map_err(|e| e.to_string())?;
        if let Some(owner) = &self.owner {
            pgtenure::leases::check_owner(owner).map_err(|e| format!("--owner: {e}"))?;
        }
        Ok(())
    }
}

pub fn run(leases: &Leases, args: &LeaseRunArgs) -> Result<u8, Failure> {
    let leases = match &args.owner {
        Some(owner) => leases.clone().with_owner(owner)?,
        None => leases.clone(),
    };
    let signals = Signals::install()?;
    let Some(lease) = acquire(&leases, args, &signals)? else {
        return Ok(EXIT_NOT_ACQUIRED);
    };
    let lease = match lease {
        Ok(lease) => lease,
        Err(signal) => return Ok(signal_status(signal)),
    };
    // A signal caught before this point came while pgtenure waited for the lease, however close to
    // the grant (the handler sets `first` itself, before the signal thread passes it on): CMD
    // never runs then.
    if let Some(signal) = signals.first() {
        say!(
            "pgtenure: got {} while acquiring lease {:?}; not running CMD, releasing the lease",
            signal_name(signal),
            args.key
        );
        release(lease);
        return Ok(signal_status(signal));
    }
    let program = &args.command[0];
    let mut command = Command::new(program);
    command
        .args(&args.command[1..])
        .env(ENV_KEY, &args.key)
        .env(ENV_TOKEN, lease.token().to_string())
        .process_group(0);
    prepare_child(&mut command);
    // Declared after `lease`, so dropped before it: a panic from here on kills CMD's group before
    // the lease's drop releases the key.
    let mut cmd = match command.spawn() {
        Ok(child) => Cmd::new(child),
        Err(e) => {
            release(lease);
            say!("pgtenure: cannot run {program:?}: {e}");
            return Ok(match e.kind() {
                io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                io::ErrorKind::PermissionDenied => EXIT_CANNOT_EXECUTE,
                _ => crate::EXIT_ERROR,
            });
        }
    };
    let exited = match watch_exit(cmd.pid) {
        Ok(exited) => exited,
        Err(e) => {
            cmd.kill_group();
            release(lease);
            return Err(e.into());
        }
    };
    loop {
        select! {
            recv(exited) -> _ => {
                let status = cmd.reap();
                release(lease);
                return Ok(status.map_or(crate::EXIT_ERROR, exit_status));
            }
            recv(lease.lost()) -> reason => {
                // CMD first: nothing may delay or prevent its signal, a report least of all.
                cmd.signal_group(libc::SIGTERM);
                let reason = reason.map_or_else(
                    |_| "its renewal stopped".to_owned(),
                    |reason| reason.to_string(),
                );
                say!(
                    "pgtenure: lease {:?} lost ({reason}); stopping {program:?} with SIGTERM, \
                     SIGKILL after {:?}",
                    args.key, args.grace
                );
                cmd.stop(&exited, args.grace);
                release(lease);
                return Ok(EXIT_LOST);
            }
            recv(signals.received) -> signal => {
                // CMD's group is not the terminal's foreground group, so a terminal's Ctrl-C reached
                // only pgtenure: whoever sent it, it is passed on. The lease is kept until CMD exits.
                if let Ok(signal) = signal {
                    cmd.signal_group(signal);
                }
            }
        }
    }
}

/// What the child does between `fork` and `exec`: it puts SIGTTOU back to its default (pgtenure
/// ignores it, and an ignored signal stays ignored across `exec`; SIGTSTP is caught, and a caught
/// signal is reset by `exec`), and asks for the parent-death signal.
fn prepare_child(command: &mut Command) {
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

/// Acquires the lease, trying again while `--wait` lasts: `None` when not acquired in time (said
/// on stderr), `Some(Err(signal))` when a signal came first.
fn acquire(
    leases: &Leases,
    args: &LeaseRunArgs,
    signals: &Signals,
) -> Result<Option<Result<Lease, i32>>, Failure> {
    // `--wait` is at most 100 years, yet a far `Instant` may not exist: then it waits without end.
    let until = Instant::now().checked_add(args.wait);
    let mut created = false;
    loop {
        let left = until.map_or(args.wait, |until| {
            until.saturating_duration_since(Instant::now())
        });
        if let Some(signal) = signals.first() {
            return Ok(Some(Err(signal)));
        }
        let outcome = match attempt(leases, args, signals)? {
            Ok(outcome) => outcome,
            Err(signal) => return Ok(Some(Err(signal))),
        };
        let refusal = match outcome {
            Ok(Ok(lease)) => return Ok(Some(Ok(lease))),
            Ok(Err(refusal)) => refusal,
            // A first lease in this database: make its table (idempotent, safe from every
            // instance at once) and try again at once.
            Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) && !created => {
                leases.create_table()?;
                created = true;
                continue;
            }
            // A database that is briefly unreachable, or a statement its statement_timeout
            // cancelled, while we wait anyway: try again.
            Err(e) if (e.is_connection() || e.is_timeout()) && !left.is_zero() => {
                say!(
                    "pgtenure: acquiring lease {:?} failed ({e}); trying again",
                    args.key
                );
                Refusal::Vacant(None)
            }
            Err(e) => return Err(e.into()),
        };
        if left.is_zero() {
            say!(
                "pgtenure: lease {:?} not acquired: {}",
                args.key,
                describe(&refusal)
            );
            return Ok(None);
        }
        select! {
            recv(signals.received) -> signal => {
                if let Ok(signal) = signal {
                    return Ok(Some(Err(signal)));
                }
            }
            default(left.min(RETRY)) => {}
        }
    }
}

/// One acquire statement, sent from a thread of its own while this thread watches for signals:
/// `Err(signal)` when one came while the statement was on its way (waiting on a row lock, or on a
/// slow database).
///
/// A signal does not abandon the statement at once: a lease it grants is released here, rather
/// than left to block the key until its TTL with nobody running CMD. A second signal stops the
/// wait; the statement's thread is then left behind (pgtenure exits), and a lease it is granted
/// lapses at its TTL, unrenewed. Otherwise the thread is joined before this returns.
fn attempt(
    leases: &Leases,
    args: &LeaseRunArgs,
    signals: &Signals,
) -> Result<Result<pgtenure::Result<Result<Lease, Refusal>>, i32>, Failure> {
    let (tx, done) = bounded(1);
    let thread = {
        let leases = leases.clone();
        let key = args.key.clone();
        let ttl = args.ttl;
        thread::Builder::new()
            .name("pgtenure-acquire".into())
            .spawn(move || {
                // Unsent when pgtenure stopped waiting: the lease, if any, is dropped (released).
                let _ = tx.send(leases.acquire_or_refusal(&key, ttl));
            })?
    };
    let finished = |outcome: Result<_, _>| -> Result<_, Failure> {
        let _ = thread.join();
        outcome.map_err(|_| "the acquire's thread ended without an answer".into())
    };
    let signal = select! {
        recv(done) -> outcome => return finished(outcome).map(Ok),
        recv(signals.received) -> signal => match signal {
            Ok(signal) => signal,
            // The signal thread is gone: only the statement is left to wait for.
            Err(_) => return finished(done.recv()).map(Ok),
        },
    };
    say!(
        "pgtenure: got {} while acquiring lease {:?}; CMD will not run. Waiting for the acquire \
         statement to return, to release the lease if it was granted (another signal exits at once)",
        signal_name(signal),
        args.key
    );
    let outcome = select! {
        recv(done) -> outcome => outcome,
        recv(signals.received) -> second => match second {
            Ok(_) => {
                say!(
                    "pgtenure: exiting without waiting; a lease granted to the acquire still on \
                     its way lapses at its TTL"
                );
                return Ok(Err(signal));
            }
            Err(_) => done.recv(),
        },
    };
    if let Ok(Ok(Ok(lease))) = finished(outcome) {
        release(lease);
    }
    Ok(Err(signal))
}

/// A forwarded signal's name, for messages.
fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        other => format!("signal {other}"),
    }
}

/// Who holds the key, for the not-acquired message.
fn describe(refusal: &Refusal) -> String {
    match refusal {
        Refusal::OtherOwner(row) => format!(
            "held by {} (token {}) until {}",
            row.owner,
            row.token,
            time(row.held_until)
        ),
        Refusal::SameOwner(row) => format!(
            "held under this owner name, {}, by another process (token {}) until {}",
            row.owner,
            row.token,
            time(row.held_until)
        ),
        Refusal::ThisFamily(_) => "held by this process".to_owned(),
        Refusal::HeldOff { until, .. } => format!(
            "the server was promoted from a standby, and keys that lapsed or were released are \
             granted again from {} (one longest TTL after the promotion, so that no holder whose \
             last renewals the standby missed still believes it holds the key)",
            time(*until)
        ),
        _ => "it was released just after it was refused; try again".to_owned(),
    }
}

/// Releases the lease after CMD ended; a failure is said, and the row lapses at its TTL.
fn release(lease: Lease) {
    let key = lease.key().to_owned();
    if let Err(e) = lease.release() {
        say!("pgtenure: could not release lease {key:?} ({e}); it lapses at its TTL");
    }
}

/// CMD's exit status as ours: its code, or 128 + the signal that ended it.
fn exit_status(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => signal_status(signal),
        (None, None) => crate::EXIT_ERROR,
    }
}

fn signal_status(signal: i32) -> u8 {
    128u8.saturating_add(signal as u8)
}

/// CMD, the leader of its own process group (its pid is the group's id), killed with its group on
/// drop unless it was reaped.
///
/// CMD is reaped only by [`Cmd::reap`], after its exit was seen (or after SIGKILL), so until then
/// neither its pid nor its group id can name another process: every signal reaches CMD's group.
struct Cmd {
    child: Child,
    pid: libc::pid_t,
    reaped: bool,
}

impl Cmd {
    fn new(child: Child) -> Cmd {
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
    fn signal_group(&self, signal: i32) {
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
    fn reap(&mut self) -> Option<ExitStatus> {
        let status = self.child.wait().ok();
        self.reaped = true;
        status
    }

    /// SIGKILL to CMD's group, then reaps CMD.
    fn kill_group(&mut self) {
        self.signal_group(libc::SIGKILL);
        self.reap();
    }

    /// After a loss and SIGTERM: waits up to `grace` for CMD to exit, then SIGKILL to its group
    /// (CMD itself if it is still running, and what it left in its group: none of it may run on
    /// without the lease); returns once CMD has been reaped.
    fn stop(&mut self, exited: &Receiver<io::Result<()>>, grace: Duration) {
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
fn watch_exit(pid: libc::pid_t) -> io::Result<Receiver<io::Result<()>>> {
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

/// The signals pgtenure catches and passes to CMD's process group. Any other signal that ends
/// pgtenure ends CMD through the parent-death signal.
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The signals of [`FORWARDED`], caught and delivered on a channel (through a pipe the handler
/// writes to).
struct Signals {
    received: Receiver<i32>,
}

/// The pipe's write end, for the handler (-1 until installed).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

/// The first signal caught (0 until one is): set by the handler itself, so it is seen at once,
/// before the signal thread has passed the signal on.
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(number: libc::c_int) {
    // Only async-signal-safe calls here: write(2) one byte, keep errno.
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // An atomic compare-exchange is async-signal-safe.
    let _ = FIRST_SIGNAL.compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst);
    let saved = errno();
    let message = [number as u8];
    // SAFETY: write from a valid one-byte buffer to the pipe; a full pipe drops the signal.
    unsafe {
        libc::write(fd, message.as_ptr().cast(), message.len());
    }
    set_errno(saved);
}

extern "C" fn do_nothing(_: libc::c_int) {}

/// Sets `number`'s handler (or `SIG_IGN`).
fn set_disposition(number: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: a zeroed sigaction with a valid handler, an empty mask and valid flags.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(number, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn errno() -> libc::c_int {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(target_os = "linux")]
fn set_errno(value: libc::c_int) {
    // SAFETY: as in errno().
    unsafe { *libc::__errno_location() = value }
}

#[cfg(not(target_os = "linux"))]
fn errno() -> libc::c_int {
    0
}

#[cfg(not(target_os = "linux"))]
fn set_errno(_: libc::c_int) {}

impl Signals {
    /// The first signal caught since [`Signals::install`], if any.
    fn first(&self) -> Option<i32> {
        match FIRST_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            signal => Some(signal),
        }
    }

    fn install() -> io::Result<Signals> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for the two descriptors pipe writes.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [read_fd, write_fd] = fds;
        // SAFETY: fcntl on descriptors we own: neither goes to CMD, and the handler never blocks.
        unsafe {
            libc::fcntl(read_fd, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(write_fd, libc::F_SETFD, libc::FD_CLOEXEC);
            libc::fcntl(write_fd, libc::F_SETFL, libc::O_NONBLOCK);
        }
        SIGNAL_PIPE.store(write_fd, Ordering::Relaxed);
        let (tx, received) = bounded(16);
        thread::Builder::new()
            .name("pgtenure-signals".into())
            .spawn(move || {
                let mut message = [0u8; 1];
                loop {
                    // SAFETY: read into a valid one-byte buffer.
                    let n = unsafe { libc::read(read_fd, message.as_mut_ptr().cast(), 1) };
                    if n == 1 {
                        if tx.send(i32::from(message[0])).is_err() {
                            return;
                        }
                    } else if n < 0
                        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
                    {
                        continue;
                    } else {
                        return;
                    }
                }
            })?;
        let forward: extern "C" fn(libc::c_int) = on_signal;
        for number in FORWARDED {
            set_disposition(number, forward as libc::sighandler_t)?;
        }
        // Job control, which would stop pgtenure alone (CMD has a process group of its own) and
        // let its lease lapse while CMD runs on: Ctrl-Z (SIGTSTP) is caught and does nothing, and
        // writing to the terminal from the background with `stty tostop` (SIGTTOU) is allowed.
        let nothing: extern "C" fn(libc::c_int) = do_nothing;
        set_disposition(libc::SIGTSTP, nothing as libc::sighandler_t)?;
        set_disposition(libc::SIGTTOU, libc::SIG_IGN)?;
        Ok(Signals { received })
    }
}
