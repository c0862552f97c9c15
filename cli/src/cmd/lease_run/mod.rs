//! `pgtenure lease-run KEY -- CMD ARGS...`: run a command only while holding a lease.
//!
//! The lease is a managed [`Lease`]: the library's renewal thread renews it every third of the TTL
//! while CMD runs, retrying a failed renewal (a killed connection, a restarting database) on a new
//! connection until the lease's local deadline. Only a loss stops CMD: the database refusing a
//! renewal (the key was force-released, or taken after a lapse) or the local deadline passing
//! without a renewal. Then CMD's tree gets SIGTERM, and SIGKILL after the grace period.
//!
//! CMD never outlives the lease, however `pgtenure` ends, and "CMD" is its whole tree: whatever it
//! started, however far it went (`setsid`, a double fork). `pgtenure` is the tree's subreaper
//! (Linux `PR_SET_CHILD_SUBREAPER`, set before CMD is spawned), so a descendant whose parent exits
//! is given to `pgtenure`, and every process of the tree can be found and signalled (`tree`).
//! - CMD runs in a process group of its own; the signals `pgtenure` is sent (SIGINT, SIGTERM,
//!   SIGHUP, SIGQUIT) go to that group and to every other process of the tree; `pgtenure` keeps the
//!   lease until CMD has exited, then releases it.
//! - CMD's end ends its tree: what CMD left running gets SIGTERM, and SIGKILL after the grace
//!   period, and the lease is released only once nothing of the tree runs. After a loss, what CMD
//!   left gets SIGKILL as soon as CMD has exited, and at once when the loss comes during that
//!   grace period (then pgtenure exits 76).
//! - CMD is killed (SIGKILL) by the kernel when `pgtenure` dies in any other way (`kill -9`, the OOM
//!   killer, a crash): Linux's parent-death signal, set in the child before `exec`. SIGKILL, not
//!   SIGTERM: nobody is left to renew the lease or to enforce the grace period, and a CMD that
//!   ignored SIGTERM would run on beside the key's next holder. That signal reaches CMD alone: the
//!   rest of the tree then runs on (documented, with the remedies: a PID namespace, a supervisor
//!   that kills a control group).
//! - A panic in `pgtenure` kills CMD's tree before the lease is released (CMD's handle is dropped
//!   before the lease's).
//! - Nothing on these paths can panic on a write: messages go to stderr through `say!`, which
//!   ignores a failed write (a dead pipe), and only after CMD was signalled.
//!
//! Here are the arguments and the run from acquire to release; `acquire` gets the lease while
//! `--wait` lasts (and releases it), `child` starts, signals, stops and reaps CMD, `tree` finds
//! and signals the rest of CMD's tree, `signals` catches pgtenure's.

mod acquire;
mod child;
mod held;
mod tree;

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use clap::Args;
use pgtenure::crossbeam_channel::{select, Receiver};
use pgtenure::semaphores::MAX_PERMITS;
use pgtenure::Db;

use self::acquire::{acquire, release};
use self::child::{exit_status, prepare_child, signal_status, Cmd, Ending};
use self::held::{Held, Source};
use self::tree::become_subreaper;
use crate::output::Output;
use crate::signals::{disarm_job_control, signal_name, Signals};
use crate::{duration, Failure, Global, DEFAULT_INTERVAL, EXIT_ERROR};

/// Exit status when the lease was not acquired within `--wait`: another holder has it
/// (EX_TEMPFAIL: try again later).
const EXIT_NOT_ACQUIRED: u8 = 75;
/// Exit status when the lease was lost while CMD ran, and CMD was stopped.
const EXIT_LOST: u8 = 76;
/// Exit status when CMD could not be found.
const EXIT_NOT_FOUND: u8 = 127;
/// Exit status when CMD could not be executed.
const EXIT_CANNOT_EXECUTE: u8 = 126;

/// The environment variable that carries the lease's key to CMD.
const ENV_KEY: &str = "PGTENURE_LEASE_KEY";
/// The environment variable that carries the lease's fencing token to CMD.
const ENV_TOKEN: &str = "PGTENURE_LEASE_TOKEN";
/// The environment variable that carries the lease's owner to CMD (its fence's `$2`).
const ENV_OWNER: &str = "PGTENURE_LEASE_OWNER";
/// The environment variable that carries the lease's fence statement to CMD (`$1` key, `$2` owner,
/// `$3` token; docs/fencing.md).
const ENV_FENCE_SQL: &str = "PGTENURE_FENCE_SQL";
/// The environment variable that carries the permit's slot to CMD (with `--permits`).
const ENV_SLOT: &str = "PGTENURE_PERMIT_SLOT";

/// What `pgtenure lease-run --help` says after the options.
pub(super) const EXIT_HELP: &str = "\
CMD runs with PGTENURE_LEASE_KEY, PGTENURE_LEASE_OWNER, PGTENURE_LEASE_TOKEN (the fencing token)
and PGTENURE_FENCE_SQL (the lease's fence: $1 key, $2 owner, $3 token) in its environment.
The lease renews every third of --ttl while CMD runs; a failed renewal (a killed connection, a
restarting database) is retried until the lease's local deadline.
CMD never outlives the lease, however pgtenure ends, and CMD includes every process it starts,
however far it goes (setsid, a double fork, a daemon): on Linux pgtenure is their subreaper, so
none can leave CMD's tree. CMD runs in a process group of its own: SIGINT, SIGTERM, SIGHUP and
SIGQUIT sent to pgtenure (a terminal's Ctrl-C included) are passed to that group and to every other
process of the tree, and pgtenure keeps the lease until CMD exits. CMD's end ends its tree: what
CMD left running gets SIGTERM, and SIGKILL after --grace, and the lease is released only once all of
it is gone (a loss meanwhile gets it SIGKILL at once, and pgtenure exits 76). If pgtenure dies
otherwise (kill -9, the OOM killer, a crash), the kernel kills CMD at once with SIGKILL (Linux's
parent-death signal; CMD cannot clean up then, as nobody is left to renew the lease). That signal
reaches CMD itself, not the processes it starts, which run on: a shell wrapper should exec its
last command, and a CMD that starts daemons can be run as
`unshare --pid --fork --kill-child CMD` (as root; elsewhere add --user --map-root-user where user
namespaces are allowed): its PID namespace, and all in it, dies with CMD. A process that another
service starts for CMD (systemd-run, at, ssh) is not CMD's. CMD is a background job to a terminal:
it cannot read from it, and Ctrl-Z does nothing. Give lease-run non-interactive commands.
A loss is the key force-released (pgtenure lease release --force), taken after a lapse, asked for
by a contender (Leases::supersede), or not renewed before the lease's local deadline. CMD can still
run for up to a third of --ttl before the loss is seen, and for --grace after it: fence CMD's own
writes with PGTENURE_FENCE_SQL where a second writer would do harm (docs/fencing.md).

Exit status:
  CMD's own status     CMD ran and exited (128+N when a signal N ended it); the lease is released
  75                   the lease was not acquired within --wait (another holder has it)
  76                   the lease was lost while CMD ran, or what it left after it exited
                       (force-released, taken after a lapse, or not renewed in time); CMD's tree
                       got SIGTERM, then SIGKILL once CMD exited or after --grace
  126, 127             CMD could not be executed, or was not found
  1                    an error (said on stderr), e.g. the database could not be reached
  128+N                pgtenure got signal N while waiting for the lease (CMD never ran)
  2                    a usage error, found before connecting (a blank KEY, --ttl under 30ms, ...)

A signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) that comes while the acquire statement is on its way
(waiting on a row lock, or on a slow database) means CMD will not run: pgtenure says so at once,
waits for that statement to return, releases the lease if it was granted, and exits 128+N. A second
signal makes it exit at once; a lease granted after that lapses at its TTL. A signal that comes
after the lease was granted and before CMD started also runs no command.

With --permits N, KEY is a semaphore of N permits (on --semaphores-table) instead of a lease: up to
N lease-runs of KEY run their commands at once, each holding a permit of its own (a slot 0 to N-1,
in PGTENURE_PERMIT_SLOT, with its own token and fence). The permit renews, is lost, is released and
fences as the lease does above; 75 means all N permits were held throughout --wait.";

#[derive(Args, Debug)]
pub(crate) struct LeaseRunArgs {
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
    /// How long CMD has to exit after SIGTERM once the lease is lost, and what CMD left running once
    /// CMD exits, before SIGKILL.
    #[arg(long, default_value = "10s", value_parser = duration::parse, allow_hyphen_values = true)]
    grace: Duration,
    /// The owner name written into the lease row. Defaults to "{hostname}-{pid}-{random hex}".
    #[arg(long)]
    owner: Option<String>,
    /// Hold one of N permits of the semaphore KEY instead of the lease KEY: up to N commands run
    /// at once (1 to 10000).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    permits: Option<u32>,
    /// The command to run and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The listings' flags, which lease-run refuses: declared here, hidden, so that its help leaves
/// them out (a flag of the same name in a subcommand keeps the global one out of it). The table
/// flags are not among them: lease-run accepts them all, so that one alias or one set of
/// `PGTENURE_*_TABLE` variables serves every subcommand (kubectl ignores `--namespace` alike).
#[derive(Args, Debug)]
struct ListingFlags {
    #[arg(long, hide = true)]
    json: bool,
    #[arg(short, long, hide = true, value_enum)]
    output: Option<Output>,
    #[arg(short, long, hide = true)]
    watch: bool,
    #[arg(long, hide = true, value_parser = duration::parse)]
    interval: Option<Duration>,
}

impl ListingFlags {
    /// Refuses the listing flags given: lease-run prints no listing, and a `--json` given to it
    /// would be silently ignored. The global flags reach these (given before `lease-run` too), and
    /// so do their defaults: a default value counts as not given.
    fn check(&self) -> Result<(), String> {
        if self.watch {
            return Err("--watch applies to listings, not to lease-run".to_owned());
        }
        if self.json || self.output == Some(Output::Json) {
            return Err(
                "--json does not apply to lease-run, which prints no listing (CMD's output is \
                 its own)"
                    .to_owned(),
            );
        }
        let flags = [
            (self.output.is_some_and(|o| o != Output::Table), "--output"),
            (
                self.interval.is_some_and(|i| i != DEFAULT_INTERVAL),
                "--interval",
            ),
        ];
        match flags.into_iter().find(|(set, _)| *set) {
            Some((_, flag)) => Err(format!(
                "{flag} is for listings; lease-run prints none (CMD's output is its own)"
            )),
            None => Ok(()),
        }
    }
}

impl LeaseRunArgs {
    /// The lease key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// Checks the arguments before anything connects: no listing flag, and by the library's rules
    /// ([`crate::input`]) the key (not blank, no NUL byte, at most 1,024 bytes), the TTL (30 ms
    /// to 100 years, a managed lease's) and the owner name. `--wait` and `--grace` (0 to 100 years) were bounded
    /// when parsed. The error says what is wrong and what is accepted; it is a usage error.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.listing.check()?;
        crate::input::check_key("lease key", &self.key)?;
        if let Some(n) = self.permits {
            if n == 0 || n > MAX_PERMITS {
                return Err(format!(
                    "--permits {n}: a semaphore has 1 to {MAX_PERMITS} permits"
                ));
            }
        }
        crate::input::check_managed_ttl(self.ttl)?;
        if let Some(owner) = &self.owner {
            crate::input::check_key("owner", owner).map_err(|e| format!("--owner: {e}"))?;
        }
        Ok(())
    }

    /// Runs CMD under the lease: CMD's exit status, or one of lease-run's own (see
    /// [`EXIT_HELP`]).
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let source = match self.permits {
            Some(n) => Source::Permits(global.semaphores(db)?, n),
            None => Source::Lease(global.leases(db)?),
        };
        let source = match &self.owner {
            Some(owner) => source.with_owner(owner)?,
            None => source,
        };
        let signals = Signals::install()?;
        disarm_job_control()?;
        let Some(lease) = acquire(&source, &self.key, self.ttl, self.wait, &signals)? else {
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
                self.key
            );
            release(&self.key, lease);
            return Ok(signal_status(signal));
        }
        let program = &self.command[0];
        let mut command = self.child_command(&source, &lease);
        // Before the spawn: no process of CMD's tree can leave it before pgtenure reaps it.
        if let Err(e) = become_subreaper() {
            release(&self.key, lease);
            return Err(e.into());
        }
        // Declared after `lease`, so dropped before it: a panic from here on kills CMD's tree before
        // the lease's drop releases the key.
        let mut cmd = match command.spawn() {
            Ok(child) => Cmd::new(child),
            Err(e) => {
                release(&self.key, lease);
                say!("pgtenure: cannot run {program:?}: {e}");
                return Ok(match e.kind() {
                    io::ErrorKind::NotFound => EXIT_NOT_FOUND,
                    io::ErrorKind::PermissionDenied => EXIT_CANNOT_EXECUTE,
                    _ => EXIT_ERROR,
                });
            }
        };
        let exited = match cmd.watch_exit() {
            Ok(exited) => exited,
            Err(e) => {
                cmd.kill_tree();
                release(&self.key, lease);
                return Err(e.into());
            }
        };
        Ok(self.supervise(lease, cmd, &exited, &signals))
    }

    /// CMD's command: its arguments, the lease in its environment, a process group of its own.
    fn child_command(&self, source: &Source, lease: &Held) -> Command {
        let mut command = Command::new(&self.command[0]);
        command
            .args(&self.command[1..])
            .env(ENV_KEY, &self.key)
            .env(ENV_TOKEN, lease.token().to_string())
            .env(ENV_OWNER, source.owner())
            .env(ENV_FENCE_SQL, lease.fence_statement().sql())
            .process_group(0);
        if let Some(slot) = lease.slot() {
            command.env(ENV_SLOT, slot.to_string());
        }
        prepare_child(&mut command);
        command
    }

    /// Watches CMD under the lease until CMD exits (its tree is then stopped) or the lease is lost
    /// (CMD's tree is stopped), passing the signals pgtenure receives on to CMD's tree; releases
    /// the lease, and returns the exit status. `cmd` comes after `lease`, so it is dropped before
    /// it: a panic kills CMD's tree before the lease's drop releases the key.
    fn supervise(&self, lease: Held, mut cmd: Cmd, exited: &Receiver<()>, signals: &Signals) -> u8 {
        let program = &self.command[0];
        loop {
            select! {
                recv(exited) -> _ => {
                    // CMD's end ends its tree, before the lease is released: what CMD left
                    // running (a daemon it started, a background job) gets SIGTERM, and SIGKILL
                    // after the grace period, while the lease is still renewed; a loss meanwhile
                    // gets them SIGKILL at once, and is the exit status.
                    let status = cmd.stop(
                        self.grace,
                        Some(&signals.received),
                        Some(lease.lost()),
                        Ending::Exited,
                    );
                    release(&self.key, lease);
                    if cmd.lost_while_stopping.is_some() {
                        return EXIT_LOST;
                    }
                    return status.map_or(EXIT_ERROR, exit_status);
                }
                recv(lease.lost()) -> reason => {
                    // CMD first: nothing may delay or prevent its signal, a report least of all.
                    cmd.signal_tree(libc::SIGTERM);
                    let reason = reason.map_or_else(
                        |_| "its renewal stopped".to_owned(),
                        |reason| reason.to_string(),
                    );
                    say!(
                        "pgtenure: lease {:?} lost ({reason}); stopping {program:?} and what it \
                         started with SIGTERM, SIGKILL after {:?}",
                        self.key, self.grace
                    );
                    cmd.stop(self.grace, Some(&signals.received), None, Ending::Lost);
                    release(&self.key, lease);
                    return EXIT_LOST;
                }
                recv(signals.received) -> signal => {
                    // CMD's group is not the terminal's foreground group, so a terminal's Ctrl-C reached
                    // only pgtenure: whoever sent it, it is passed on, to CMD's whole tree. The lease
                    // is kept until CMD exits, and its tree with it.
                    if let Ok(signal) = signal {
                        cmd.signal_tree(signal);
                    }
                }
            }
        }
    }
}
