//! `pgtenure`: see and fix what pgtenure holds in a database, and run a command under a lease.
//!
//! Listings print aligned tables, or JSON with `--json`, on stdout; errors go to stderr with the
//! library's message, and the exit status is non-zero. See `pgtenure --help` and
//! `docs/operating.md`.
//!
//! Layout: this file holds the checks made before connecting, the connection and `--watch`;
//! `global` the flags every subcommand shares and the database they name; `cmd/` has one file per
//! subcommand (its arguments and its `run`), `cmd/lease_run/` the command run under a lease,
//! `cmd/exporter/` the metrics and status page server; `output` renders every listing, as a table
//! or as JSON, and says why a command failed; `signals` catches the signals that end lease-run, the
//! exporter and `--watch`; `duration` parses `30s`, `500ms`, `1m30s`.

#![warn(missing_debug_implementations, unreachable_pub)]

/// `eprintln!` that cannot panic: a failed write to stderr is ignored. Rust ignores SIGPIPE, so a
/// write to a closed pipe (a log shipper that died) fails with EPIPE, and `eprintln!` would panic:
/// `lease-run` must still signal its command and release its lease.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `print!` that cannot panic: see [`write_stdout`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` that cannot panic: see [`write_stdout`].
macro_rules! outln {
    () => {
        $crate::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod cmd;
mod duration;
mod global;
mod input;
mod output;
mod signals;

use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser};
use pgtenure::Error;

use crate::cmd::Command;
use crate::global::{builder, Global};
use crate::output::{report, Failure};

/// Writes to stdout, flushed. Its reader gone (`pgtenure leases --watch | head -1`), the command
/// ends at once and quietly with 141, as a shell reports a `cat` that SIGPIPE ended (Rust ignores
/// SIGPIPE, and `print!` would panic); another failure (a full disk) is said on stderr and ends it
/// with 1. Only listings and actions print on stdout: never `lease-run`, whose command must be
/// stopped before it ends.
pub(crate) fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        say!("pgtenure: cannot write to stdout: {e}");
        std::process::exit(i32::from(EXIT_ERROR));
    }
}

/// Exit status when a listing or action failed (the error is on stderr).
const EXIT_ERROR: u8 = 1;

/// How often `--watch` prints a listing again unless `--interval` says.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Parser, Debug)]
#[command(
    name = "pgtenure",
    version,
    about = "See and fix what pgtenure holds in PostgreSQL (leases, leaders, members, units, jobs), \
             and run a command under a lease",
    after_help = "Times are the database's, in UTC. Liveness is decided by the database clock. \
                  Exit status: 0 on success, 1 on an error (said on stderr), 2 on a usage error; \
                  lease-run has its own (see pgtenure lease-run --help)."
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

fn main() -> ExitCode {
    if log::set_logger(&WARNINGS).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
    // An empty variable is unset, as libpq takes an empty PG* variable (and this command an empty
    // DATABASE_URL); clap would take it as the table name "". Still one thread here.
    for variable in TABLE_VARIABLES {
        if std::env::var_os(variable).is_some_and(|v| v.is_empty()) {
            std::env::remove_var(variable);
        }
    }
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Some((name, sub)) = matches.subcommand() {
        if let Some((_, _, flags)) = LISTING_FLAGS_UNUSED.iter().find(|(n, ..)| *n == name) {
            if let Some(flag) = flags.iter().find(|f| {
                [&matches, sub]
                    .iter()
                    .any(|m| m.value_source(f) == Some(clap::parser::ValueSource::CommandLine))
            }) {
                command()
                    .error(
                        clap::error::ErrorKind::ArgumentConflict,
                        format!(
                            "--{flag} applies to listings (status, leases, lease show, leader, \
                             members, units, jobs), not to {name}"
                        ),
                    )
                    .exit();
            }
        }
    }
    if matches!(cli.command, Command::Migrate(_)) {
        MIGRATING.store(true, std::sync::atomic::Ordering::Relaxed);
        log::set_max_level(log::LevelFilter::Info);
    }
    // Arguments clap cannot check alone are checked before connecting: a usage error (exit 2).
    if let Command::LeaseRun(args) = &cli.command {
        if let Err(e) = args.check() {
            let mut command = Cli::command();
            command.build();
            let subcommand = command
                .find_subcommand_mut("lease-run")
                .expect("lease-run is a subcommand");
            subcommand
                .error(clap::error::ErrorKind::ValueValidation, e)
                .exit();
        }
    }
    if cli.global.watch && !cli.command.lists() {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--watch applies to listings (status, leases, lease show, leader, members, units, \
                 jobs), not to actions",
            )
            .exit();
    }
    if let Err(e) = check(&cli) {
        Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit();
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            report(&e);
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// The listing flags (global, so that they go anywhere on the line) that do nothing in a
/// subcommand: hidden from its `--help` (the first list) and refused there (the second; lease-run
/// refuses its `--json` and `-o` itself, saying why). `--watch` is refused for every action too.
/// `migrate` prints its report as JSON with `--json`.
const LISTING_FLAGS_UNUSED: &[(&str, &[&str], &[&str])] = &[
    (
        "exporter",
        &["json", "output", "watch", "interval"],
        &["json", "output", "watch", "interval"],
    ),
    (
        "lease-run",
        &["json", "output", "watch", "interval"],
        &["watch", "interval"],
    ),
    ("migrate", &["watch", "interval"], &["watch", "interval"]),
];

/// The command line's definition, with the global flags that do nothing in a subcommand hidden
/// from its help.
fn command() -> clap::Command {
    let mut command = Cli::command();
    // Propagates the global flags into every subcommand, where they can then be hidden.
    command.build();
    for (name, flags, _) in LISTING_FLAGS_UNUSED {
        // In place, in order: the built command's index of flags stays right (`mut_arg` would
        // move the flag to the end and leave that index pointing elsewhere).
        command = command.mut_subcommand(name, |sub| {
            sub.mut_args(|arg| {
                let unused = flags.contains(&arg.get_id().as_str());
                arg.hide(unused)
            })
        });
    }
    command
}

/// The library's warnings about the connection's settings (a password file open to others, which
/// is ignored), said on stderr as psql says them; each once, though the settings are read twice
/// (checked before connecting, then used).
struct Warnings {
    said: std::sync::Mutex<Vec<String>>,
}

static WARNINGS: Warnings = Warnings {
    said: std::sync::Mutex::new(Vec::new()),
};

/// Set for `pgtenure migrate`: what the migrations say (each table migrated, a wait behind another
/// session's lock and its retry) is said on stderr too, so a migrate waiting behind a long
/// transaction is not silent for its minute.
static MIGRATING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        let target = metadata.target();
        (metadata.level() <= log::Level::Warn && target.starts_with("pgtenure::db::libpq"))
            || (MIGRATING.load(std::sync::atomic::Ordering::Relaxed)
                && metadata.level() <= log::Level::Info
                && target == "pgtenure::db")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = record.args().to_string();
        let mut said = self
            .said
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if record.level() > log::Level::Warn {
            // Only the migrations' own lines ("migrate <kind> table: ..."), not the pool's.
            if text.starts_with("migrate ") {
                say!("pgtenure: {text}");
            }
        } else if !said.contains(&text) {
            say!("pgtenure: warning: {text}");
            said.push(text);
        }
    }

    fn flush(&self) {}
}

/// The variables that name the tables (`--leases-table` and the others).
const TABLE_VARIABLES: [&str; 6] = [
    "PGTENURE_LEASES_TABLE",
    "PGTENURE_LEADER_TABLE",
    "PGTENURE_TICKS_TABLE",
    "PGTENURE_PROCESSES_TABLE",
    "PGTENURE_UNITS_TABLE",
    "PGTENURE_SEMAPHORES_TABLE",
];

/// Checks what the library would refuse, before connecting (a usage error, exit 2): the URL, the
/// table names, the lease key and the fleet name, with the library's own checks on a pool that
/// has connected nothing yet.
fn check(cli: &Cli) -> Result<(), String> {
    let global = &cli.global;
    let checked = |e: Error| e.to_string();
    let db = builder(global)?.build_lazy().map_err(checked)?;
    // Every table flag is checked, whether this subcommand reads its table or not: a bad name is
    // a mistake in the alias or the PGTENURE_*_TABLE variable that every subcommand shares.
    global.leases(&db).map_err(checked)?;
    global.elector(&db).map_err(checked)?;
    global.ticks(&db).map_err(checked)?;
    global.units(&db).map_err(checked)?;
    global.semaphores(&db).map_err(checked)?;
    cli.command.check(&db, global)
}

/// Connects and runs the subcommand, once or, with `--watch`, at every interval until interrupted.
fn run(cli: Cli) -> Result<u8, Failure> {
    let global = &cli.global;
    // A few connections suffice (lease-run's renewals and release, or one listing at a time), and an
    // operator waits 5 s, not the library's 10 s, to hear that the database is unreachable.
    // Given and well-formed: checked before.
    let builder = builder(global)?
        .max_size(4)?
        .connection_timeout(Duration::from_secs(5))?
        // Named after what this run does (`pgtenure lease-run KEY`), so an operator can tell its
        // sessions apart in pg_stat_activity; an application_name in the URL, the service or
        // PGAPPNAME wins.
        .fallback_application_name(&cli.command.application_name())?
        // A release (lease-run's, `lease release`) wakes the waiting lease-runs at once; the
        // listener connects only for a waiter (`lease-run --wait`).
        .handover_notifications(true);
    // The exporter starts while the database is down, and says so in its metrics.
    let db = if cli.command.serves() {
        builder.build_lazy()?
    } else {
        builder.build()?
    };
    if !global.watch {
        return cli.command.run(&db, global);
    }
    // Checked before connecting: --watch is for listings. A failed listing is said and tried
    // again at the next interval, as the database may come back. It stops on SIGINT, SIGTERM,
    // SIGHUP or SIGQUIT, even when started in the background by a script (which leaves SIGINT
    // ignored), with the status a shell gives a command a signal ended (128 + its number).
    let signals = signals::Signals::install()?;
    let every = global.interval;
    loop {
        out!("\x1b[H\x1b[2J");
        outln!(
            "Every {every:?}: {} (interrupt to stop)\n",
            cli.command.application_name()
        );
        if let Err(e) = cli.command.run(&db, global) {
            report(&e);
        }
        match signals.received.recv_timeout(every) {
            Ok(signal) => return Ok(u8::try_from(128 + signal).unwrap_or(EXIT_ERROR)),
            Err(pgtenure::crossbeam_channel::RecvTimeoutError::Timeout) => {}
            // The signal thread is gone (it never ends while the process runs).
            Err(pgtenure::crossbeam_channel::RecvTimeoutError::Disconnected) => {
                std::thread::sleep(every)
            }
        }
    }
}
