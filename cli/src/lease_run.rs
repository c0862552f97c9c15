//! `pgtenure lease-run KEY -- CMD ARGS...`: run a command only while holding a lease.
//!
//! The lease is a managed [`Lease`]: the library's renewal thread renews it every third of the TTL
//! while CMD runs, retrying a failed renewal (a killed connection, a restarting database) on a new
//! connection until the lease's local deadline. Only a loss stops CMD: the database refusing a
//! renewal (the key was force-released, or taken after a lapse) or the local deadline passing
//! without a renewal. Then CMD gets SIGTERM, and SIGKILL after the grace period.

use std::io;
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
restarting database) is retried until the lease's local deadline. SIGINT and SIGTERM sent to
pgtenure are forwarded to CMD (a terminal's Ctrl-C reaches CMD directly, and is not sent twice).
Signals go to CMD itself, not to processes it starts: a shell wrapper should exec its last command.
A loss is the key force-released (pgtenure lease release --force), taken after a lapse, asked for
by a contender (Leases::supersede), or not renewed before the lease's local deadline. CMD can still
run for up to a third of --ttl before the loss is seen, and for --grace after it: fence CMD's own
writes with PGTENURE_LEASE_TOKEN where a second writer would do harm.

Exit status:
  CMD's own status     CMD ran and exited (128+N when a signal N ended it); the lease is released
  75                   the lease was not acquired within --wait (another holder has it)
  76                   the lease was lost while CMD ran (force-released, taken after a lapse, or not
                       renewed in time); CMD was stopped with SIGTERM, then SIGKILL after --grace
  126, 127             CMD could not be executed, or was not found
  1                    an error (said on stderr), e.g. the database could not be reached
  128+N                pgtenure got signal N while waiting for the lease (CMD never ran)";

#[derive(Args, Debug)]
pub struct LeaseRunArgs {
    /// The lease key.
    key: String,
    /// The lease's TTL: it renews every third of it, and a loss is noticed within it.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    ttl: Duration,
    /// How long to keep trying while another holder has the key, e.g. 2m (0: try once).
    #[arg(long, default_value = "0", value_parser = duration::parse)]
    wait: Duration,
    /// Once the lease is lost: how long CMD has to exit after SIGTERM before it gets SIGKILL.
    #[arg(long, default_value = "10s", value_parser = duration::parse)]
    grace: Duration,
    /// The owner name written into the lease row. Defaults to "{hostname}-{pid}-{random hex}".
    #[arg(long)]
    owner: Option<String>,
    /// The command to run and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
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
    let program = &args.command[0];
    let mut child = match Command::new(program)
        .args(&args.command[1..])
        .env(ENV_KEY, &args.key)
        .env(ENV_TOKEN, lease.token().to_string())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            release(lease);
            eprintln!("pgtenure: cannot run {program:?}: {e}");
            return Ok(match e.kind() {
                io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                io::ErrorKind::PermissionDenied => EXIT_CANNOT_EXECUTE,
                _ => crate::EXIT_ERROR,
            });
        }
    };
    let pid = child.id() as libc::pid_t;
    let exited = match watch_exit(pid) {
        Ok(exited) => exited,
        Err(e) => {
            kill(pid, libc::SIGKILL);
            let _ = child.wait();
            release(lease);
            return Err(e.into());
        }
    };
    loop {
        select! {
            recv(exited) -> _ => {
                let status = child.wait()?;
                release(lease);
                return Ok(exit_status(status));
            }
            recv(lease.lost()) -> reason => {
                let reason = reason.map_or_else(
                    |_| "its renewal stopped".to_owned(),
                    |reason| reason.to_string(),
                );
                eprintln!(
                    "pgtenure: lease {:?} lost ({reason}); stopping {program:?} with SIGTERM, \
                     SIGKILL after {:?}",
                    args.key, args.grace
                );
                stop(&mut child, pid, &exited, args.grace);
                release(lease);
                return Ok(EXIT_LOST);
            }
            recv(signals.received) -> signal => {
                // A terminal's signal (Ctrl-C) went to CMD's process group already.
                if let Ok(Signal { number, from_process: true }) = signal {
                    kill(pid, number);
                }
            }
        }
    }
}

/// Acquires the lease, trying again while `--wait` lasts: `None` when not acquired in time (said
/// on stderr), `Some(Err(signal))` when a signal came first.
fn acquire(
    leases: &Leases,
    args: &LeaseRunArgs,
    signals: &Signals,
) -> Result<Option<Result<Lease, i32>>, Failure> {
    let until = Instant::now() + args.wait;
    let mut created = false;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let refusal = match leases.acquire_or_refusal(&args.key, args.ttl) {
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
                eprintln!(
                    "pgtenure: acquiring lease {:?} failed ({e}); trying again",
                    args.key
                );
                Refusal::Vacant(None)
            }
            Err(e) => return Err(e.into()),
        };
        if left.is_zero() {
            eprintln!(
                "pgtenure: lease {:?} not acquired: {}",
                args.key,
                describe(&refusal)
            );
            return Ok(None);
        }
        select! {
            recv(signals.received) -> signal => {
                if let Ok(signal) = signal {
                    return Ok(Some(Err(signal.number)));
                }
            }
            default(left.min(RETRY)) => {}
        }
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
        eprintln!("pgtenure: could not release lease {key:?} ({e}); it lapses at its TTL");
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

/// SIGTERM, then SIGKILL after `grace`; returns once CMD has exited and been reaped.
fn stop(child: &mut Child, pid: libc::pid_t, exited: &Receiver<io::Result<()>>, grace: Duration) {
    kill(pid, libc::SIGTERM);
    if exited.recv_timeout(grace).is_err() {
        eprintln!("pgtenure: CMD did not exit within {grace:?} of SIGTERM; sending SIGKILL");
        kill(pid, libc::SIGKILL);
        let _ = exited.recv();
    }
    let _ = child.wait();
}

/// Sends `signal` to CMD. CMD is reaped only by this thread (`Child::wait`), after its exit was
/// seen, so until then `pid` cannot name another process.
fn kill(pid: libc::pid_t, signal: i32) {
    // SAFETY: kill has no memory effects; pid is our unreaped child.
    unsafe {
        libc::kill(pid, signal);
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

/// A signal pgtenure received.
#[derive(Debug, Clone, Copy)]
struct Signal {
    number: i32,
    /// Sent by a process (`kill`), not by the kernel for a terminal (Ctrl-C goes to the whole
    /// foreground process group, CMD included).
    from_process: bool,
}

/// SIGINT and SIGTERM, caught and delivered on a channel (through a pipe the handler writes to).
struct Signals {
    received: Receiver<Signal>,
}

/// The pipe's write end, for the handler (-1 until installed).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(number: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Only async-signal-safe calls here: read si_code, write(2) two bytes, keep errno.
    // SAFETY: the kernel passes a valid siginfo_t with SA_SIGINFO.
    let from_process = !info.is_null() && unsafe { (*info).si_code } <= 0;
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let saved = errno();
    let message = [number as u8, u8::from(from_process)];
    // SAFETY: write from a valid two-byte buffer to the pipe; a full pipe drops the signal.
    unsafe {
        libc::write(fd, message.as_ptr().cast(), message.len());
    }
    set_errno(saved);
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
                let mut message = [0u8; 2];
                loop {
                    // SAFETY: read into a valid two-byte buffer.
                    let n = unsafe { libc::read(read_fd, message.as_mut_ptr().cast(), 2) };
                    if n == 2 {
                        let signal = Signal {
                            number: i32::from(message[0]),
                            from_process: message[1] == 1,
                        };
                        if tx.send(signal).is_err() {
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
        for number in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction with our handler, an empty mask and valid flags.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    on_signal;
                action.sa_sigaction = handler as libc::sighandler_t;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(number, &action, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(Signals { received })
    }
}
