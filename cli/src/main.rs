//! `pgtenure`: see and fix what pgtenure holds in a database, and run a command under a lease.
//!
//! Listings print aligned tables, or JSON with `--json`, on stdout; errors go to stderr with the
//! library's message, and the exit status is non-zero. See `pgtenure --help` and the README's
//! "Operating it".

/// `eprintln!` that cannot panic: a failed write to stderr is ignored. Rust ignores SIGPIPE, so a
/// write to a closed pipe (a log shipper that died) fails with EPIPE, and `eprintln!` would panic:
/// `lease-run` must still signal its command and release its lease.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod duration;
mod lease_run;
mod output;

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::{Args, CommandFactory, Parser, Subcommand};
use pgtenure::membership::Units;
use pgtenure::postgres::error::SqlState;
use pgtenure::{Db, Elector, Error, Leases, TickClaims};
use serde_json::{json, Value};

use crate::output::{age, json_time, opt_time, relative, time, yes_no, Table};

/// What a command can fail with: the library's errors, and the command's own (a missing URL, a
/// command that cannot be started), each printed with its message.
type Failure = Box<dyn std::error::Error>;

/// Exit status when a listing or action failed (the error is on stderr).
const EXIT_ERROR: u8 = 1;

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

#[derive(Args, Debug)]
struct Global {
    /// The database: a postgres:// URL or key=value connection string.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    url: Option<String>,
    /// Print JSON instead of a table (the same as `-o json`).
    #[arg(long, global = true)]
    json: bool,
    /// How listings print: `table` (times relative to the database clock), `wide` (also the
    /// absolute times and full ids) or `json`.
    #[arg(short, long, global = true, value_enum, default_value = "table")]
    output: Output,
    /// Print the listing again every `--interval`, until interrupted.
    #[arg(short, long, global = true)]
    watch: bool,
    /// How often `--watch` prints the listing again, e.g. 2s or 500ms.
    #[arg(long, global = true, default_value = "2s", value_parser = duration::parse)]
    interval: Duration,
    /// The leases table.
    #[arg(long, global = true, default_value = pgtenure::leases::DEFAULT_TABLE)]
    leases_table: String,
    /// The leader table.
    #[arg(long, global = true, default_value = pgtenure::elector::DEFAULT_TABLE)]
    leader_table: String,
    /// The tick claims (jobs) table.
    #[arg(long, global = true, default_value = pgtenure::tick_claims::DEFAULT_TABLE)]
    ticks_table: String,
    /// The membership processes table.
    #[arg(long, global = true, default_value = pgtenure::membership::DEFAULT_PROCESSES_TABLE)]
    processes_table: String,
    /// The membership units table.
    #[arg(long, global = true, default_value = pgtenure::membership::DEFAULT_UNITS_TABLE)]
    units_table: String,
}

impl Global {
    /// Whether listings print JSON (`--json` or `-o json`).
    fn as_json(&self) -> bool {
        self.json || self.output == Output::Json
    }
}

/// How listings print.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Table,
    Wide,
    Json,
}

/// What a table is rendered against: the database's clock, and whether it is wide.
struct View {
    now: SystemTime,
    wide: bool,
}

impl View {
    /// An id in full when wide, else its first 8 characters (as `docker ps` shows ids).
    fn id(&self, id: &str) -> String {
        if self.wide {
            id.to_owned()
        } else {
            id.chars().take(8).collect()
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Everything at a glance: leases, leaders, members with their unit counts, jobs.
    Status,
    /// Every lease row, live or lapsed.
    Leases {
        /// Only keys that start with this text (% and _ are plain characters).
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// One lease: show it, or release it whoever holds it.
    Lease {
        #[command(subcommand)]
        action: LeaseAction,
    },
    /// Who leads each fleet; or ask a leader to step down.
    Leader {
        /// Only this fleet.
        #[arg(long)]
        name: Option<String>,
        #[command(subcommand)]
        action: Option<LeaderAction>,
    },
    /// Every membership process, live or expired, with the units it owns.
    Members,
    /// Every registered unit and its owner.
    Units {
        /// Only units whose row names this process (its id as `members` shows it, or a prefix).
        #[arg(long)]
        process: Option<String>,
    },
    /// Every recurring job's last tick, who claimed it and whether it is busy.
    Jobs,
    /// Run CMD only while holding the lease KEY (flock across machines).
    #[command(after_help = lease_run::EXIT_HELP)]
    LeaseRun(lease_run::LeaseRunArgs),
}

#[derive(Subcommand, Debug)]
enum LeaseAction {
    /// Who holds KEY, with which token, until when.
    Show { key: String },
    /// End KEY's tenure now, whoever holds it: its holder learns it at its next renewal (a
    /// `lease-run` holder stops its command) and its fencing token no longer passes the fence.
    Release {
        key: String,
        /// Required: this cuts another process's tenure short.
        #[arg(long, required = true)]
        force: bool,
    },
}

#[derive(Subcommand, Debug)]
enum LeaderAction {
    /// Ask the fleet's live leader to step down (Elector::request_resign): at its next renewal it
    /// stops leading and then resigns, and another member wins the next poll. A leader that no
    /// longer renews keeps the tenure until it expires.
    Resign {
        /// The fleet.
        #[arg(long, default_value = pgtenure::elector::DEFAULT_NAME)]
        name: String,
        /// Required: this moves the leadership away from a running leader.
        #[arg(long, required = true)]
        force: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Arguments clap cannot check alone are checked before connecting: a usage error (exit 2).
    if let Command::LeaseRun(args) = &cli.command {
        // lease-run prints no listing: a --json given to it would be silently ignored.
        let check = if cli.global.watch {
            Err("--watch applies to listings, not to lease-run".to_owned())
        } else if cli.global.as_json() {
            Err(
                "--json does not apply to lease-run, which prints no listing (CMD's output is \
                 its own)"
                    .to_owned(),
            )
        } else {
            args.check()
        };
        if let Err(e) = check {
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
    if cli.global.watch && !lists(&cli.command) {
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

/// Checks what the library would refuse, before connecting (a usage error, exit 2): the URL, the
/// table names, the lease key and the fleet name, with the library's own checks on a pool that
/// has connected nothing yet.
fn check(cli: &Cli) -> Result<(), String> {
    let global = &cli.global;
    let url = global.url.as_deref().unwrap_or_default();
    if url.trim().is_empty() {
        return Err(
            "no database given; pass --url postgres://user@host:port/database or set DATABASE_URL"
                .into(),
        );
    }
    let checked = |e: Error| e.to_string();
    let db = Db::builder(url)
        .and_then(|builder| builder.build_lazy())
        .map_err(checked)?;
    Leases::new(&db)
        .with_table(&global.leases_table)
        .map_err(checked)?;
    if !matches!(cli.command, Command::LeaseRun(_)) {
        Elector::new(&db)
            .with_table(&global.leader_table)
            .map_err(checked)?;
        TickClaims::new(&db)
            .with_table(&global.ticks_table)
            .map_err(checked)?;
        units(&db, global).map_err(checked)?;
    }
    match &cli.command {
        // A key as an acquire checks it (the TTL aside).
        Command::Lease {
            action: LeaseAction::Show { key } | LeaseAction::Release { key, .. },
        } => {
            pgtenure::leases::check_acquire(key, pgtenure::leases::MIN_MANAGED_TTL).map_err(checked)
        }
        Command::Leader {
            action: Some(LeaderAction::Resign { name, .. }),
            ..
        } => Elector::new(&db).with_name(name).map(drop).map_err(checked),
        _ => Ok(()),
    }
}

/// Says why the command failed, on stderr.
fn report(e: &Failure) {
    match e.downcast_ref::<Error>() {
        // An operator's question, not the application's: say what is missing and who creates
        // it, not which library call to make.
        Some(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => say!(
            "pgtenure: {}; {MISSING_TABLES}",
            e.as_db_error()
                .map_or("a table does not exist", |db| db.message())
        ),
        _ => say!("pgtenure: {e}"),
    }
}

/// How often `--watch` prints a listing again unless `--interval` says.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// What to do about pgtenure's tables missing in the database the command was given.
const MISSING_TABLES: &str = "the application creates its tables at startup (pgtenure::migrate, \
     or create_table on each primitive); check --url and the table flags (--leases-table, \
     --leader-table, --ticks-table, --processes-table, --units-table)";

/// `pgtenure` and the subcommand, as the command's connections name themselves: printable ASCII,
/// at most 63 bytes (what the server keeps).
fn application_name(command: &Command) -> String {
    let role = match command {
        Command::Status => "status".to_owned(),
        Command::Leases { .. } => "leases".to_owned(),
        Command::Lease { action } => match action {
            LeaseAction::Show { key } => format!("lease show {key}"),
            LeaseAction::Release { key, .. } => format!("lease release {key}"),
        },
        Command::Leader { name, .. } => match name {
            Some(name) => format!("leader {name}"),
            None => "leader".to_owned(),
        },
        Command::Members => "members".to_owned(),
        Command::Units { .. } => "units".to_owned(),
        Command::Jobs => "jobs".to_owned(),
        Command::LeaseRun(args) => format!("lease-run {}", args.key()),
    };
    let name: String = format!("pgtenure {role}")
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .take(63)
        .collect();
    name
}

fn run(cli: Cli) -> Result<u8, Failure> {
    let global = &cli.global;
    // Given and well-formed: checked before.
    let url = global.url.as_deref().unwrap_or_default();
    // A few connections suffice (lease-run's renewals and release, or one listing at a time), and an
    // operator waits 5 s, not the library's 10 s, to hear that the database is unreachable.
    let mut builder = Db::builder(url)?
        .max_size(4)?
        .connection_timeout(Duration::from_secs(5))?;
    // Named after what this run does (`pgtenure lease-run KEY`), so an operator can tell its
    // sessions apart in pg_stat_activity; an application_name in the URL wins.
    if !url.contains("application_name") {
        builder = builder.application_name(&application_name(&cli.command))?;
    }
    let db = builder.build()?;
    if !global.watch {
        return execute(&db, global, &cli.command);
    }
    // Checked before connecting: --watch is for listings. A failed listing is said and tried
    // again at the next interval, as the database may come back.
    let every = global.interval.max(Duration::from_millis(100));
    loop {
        print!("\x1b[H\x1b[2J");
        println!(
            "Every {every:?}: {} (interrupt to stop)\n",
            application_name(&cli.command)
        );
        if let Err(e) = execute(&db, global, &cli.command) {
            report(&e);
        }
        std::thread::sleep(every);
    }
}

/// Whether `command` only lists (so it may be watched).
fn lists(command: &Command) -> bool {
    match command {
        Command::Status
        | Command::Leases { .. }
        | Command::Members
        | Command::Units { .. }
        | Command::Jobs => true,
        Command::Lease { action } => matches!(action, LeaseAction::Show { .. }),
        Command::Leader { action, .. } => action.is_none(),
        Command::LeaseRun(_) => false,
    }
}

/// What a table is rendered against: the database clock (one statement; none for JSON).
fn view(db: &Db, global: &Global) -> Result<View, Failure> {
    let now = if global.as_json() {
        SystemTime::UNIX_EPOCH
    } else {
        // Unnamed, in one round trip (behind a pooler as well).
        let rows = db.connection()?.query_typed("SELECT now()", &[])?;
        rows.first()
            .map_or(SystemTime::UNIX_EPOCH, |row| row.get(0))
    };
    Ok(View {
        now,
        wide: global.output == Output::Wide,
    })
}

fn execute(db: &Db, global: &Global, command: &Command) -> Result<u8, Failure> {
    let db = db.clone();
    match command {
        Command::Status => status(&db, global),
        Command::Leases { prefix } => {
            let leases = Leases::new(&db).with_table(&global.leases_table)?;
            let rows = leases.list(prefix)?;
            let view = view(&db, global)?;
            show(global, &leases_json(&rows), || leases_table(&rows, &view))
        }
        Command::Lease { action } => {
            let leases = Leases::new(&db).with_table(&global.leases_table)?;
            match action {
                LeaseAction::Show { key } => match leases.holder(key)? {
                    Some(row) => {
                        let rows = [row];
                        let view = view(&db, global)?;
                        show(global, &leases_json(&rows)[0], || {
                            leases_table(&rows, &view)
                        })
                    }
                    None => {
                        // Not found: exit 1, as `kubectl get` does for a missing object.
                        if global.as_json() {
                            println!("null");
                        } else {
                            say!("pgtenure: lease {key:?} has no row: nobody holds it");
                        }
                        Ok(EXIT_ERROR)
                    }
                },
                LeaseAction::Release { key, force: _ } => {
                    let before = leases.holder(key)?;
                    let released = leases.force_release(key)?;
                    let owner = before.as_ref().map(|row| row.owner.as_str());
                    if global.as_json() {
                        println!(
                            "{}",
                            json!({ "key": key, "released": released, "owner": owner })
                        );
                    } else if released {
                        println!(
                            "released lease {key:?} (held by {}); its holder learns it at its next \
                             renewal",
                            owner.unwrap_or("?")
                        );
                    } else {
                        println!("lease {key:?} was not held: nothing to release");
                    }
                    Ok(0)
                }
            }
        }
        Command::Leader { name, action } => {
            let elector = Elector::new(&db).with_table(&global.leader_table)?;
            match action {
                Some(LeaderAction::Resign { name, force: _ }) => {
                    let elector = elector.with_name(name)?;
                    let leader = elector.leader()?;
                    let asked = elector.request_resign()?;
                    let holder = leader.as_ref().map(|l| l.holder.as_str());
                    if global.as_json() {
                        println!(
                            "{}",
                            json!({ "name": name, "asked": asked, "holder": holder })
                        );
                    } else if asked {
                        println!(
                            "asked {} to step down from fleet {name:?}; it does at its next renewal",
                            holder.unwrap_or("the leader")
                        );
                    } else {
                        println!("nobody leads fleet {name:?}: nothing to resign");
                    }
                    Ok(0)
                }
                None => {
                    let mut leaders = elector.leaders()?;
                    if let Some(name) = name {
                        leaders.retain(|l| &l.name == name);
                    }
                    let view = view(&db, global)?;
                    show(global, &leaders_json(&leaders), || {
                        leaders_table(&leaders, &view)
                    })
                }
            }
        }
        Command::Members => {
            let units = units(&db, global)?;
            let members = units.processes()?;
            let view = view(&db, global)?;
            show(global, &members_json(&members), || {
                members_table(&members, &view)
            })
        }
        Command::Units { process } => {
            let units = units(&db, global)?;
            let mut assignments = units.assignments()?;
            if let Some(process) = process {
                assignments.retain(|a| {
                    a.owner
                        .as_deref()
                        .is_some_and(|o| o.starts_with(process.as_str()))
                });
            }
            let view = view(&db, global)?;
            show(global, &units_json(&assignments), || {
                units_table(&assignments, &view)
            })
        }
        Command::Jobs => {
            let ticks = TickClaims::new(&db).with_table(&global.ticks_table)?;
            let jobs = ticks.jobs()?;
            let view = view(&db, global)?;
            show(global, &jobs_json(&jobs), || jobs_table(&jobs, &view))
        }
        Command::LeaseRun(args) => {
            let leases = Leases::new(&db).with_table(&global.leases_table)?;
            lease_run::run(&leases, args)
        }
    }
}

fn units(db: &Db, global: &Global) -> Result<Units, Error> {
    Units::new(db).with_tables(&global.processes_table, &global.units_table)
}

/// Prints `json` with `--json`, else the table `text` makes.
fn show(global: &Global, json: &Value, text: impl FnOnce() -> String) -> Result<u8, Failure> {
    if global.as_json() {
        println!("{json}");
    } else {
        print!("{}", text());
    }
    Ok(0)
}

/// One section of `status`: its rows, or `None` when its table does not exist (that primitive is
/// not used in this database).
fn section<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(rows) => Ok(Some(rows)),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(e),
    }
}

fn status(db: &Db, global: &Global) -> Result<u8, Failure> {
    let view = view(db, global)?;
    let leases = section(Leases::new(db).with_table(&global.leases_table)?.list(""))?;
    let leaders = section(Elector::new(db).with_table(&global.leader_table)?.leaders())?;
    let units = units(db, global)?;
    let members = section(units.processes())?;
    let jobs = section(TickClaims::new(db).with_table(&global.ticks_table)?.jobs())?;
    let missing: Vec<&str> = [
        (leases.is_none(), global.leases_table.as_str()),
        (leaders.is_none(), global.leader_table.as_str()),
        (members.is_none(), global.processes_table.as_str()),
        (jobs.is_none(), global.ticks_table.as_str()),
    ]
    .into_iter()
    .filter_map(|(absent, table)| absent.then_some(table))
    .collect();
    if missing.len() == 4 {
        // Nothing to show: the wrong database, or tables of other names.
        say!(
            "pgtenure: none of pgtenure's tables is in this database ({}); {MISSING_TABLES}",
            missing.join(", ")
        );
        return Ok(EXIT_ERROR);
    }
    if global.as_json() {
        println!(
            "{}",
            json!({
                "leases": leases.as_deref().map(leases_json),
                "leaders": leaders.as_deref().map(leaders_json),
                "members": members.as_deref().map(members_json),
                "jobs": jobs.as_deref().map(jobs_json),
            })
        );
        return Ok(0);
    }
    let heading = |what: &str, table: &str, summary: Option<String>| {
        if let Some(summary) = summary {
            println!("{what} ({table}): {summary}");
        }
    };
    heading(
        "Leases",
        &global.leases_table,
        leases.as_ref().map(|rows| {
            let live = rows.iter().filter(|r| r.live).count();
            format!("{live} held, {} rows", rows.len())
        }),
    );
    if let Some(rows) = &leases {
        print!("{}", leases_table(rows, &view));
        println!();
    }
    heading(
        "Leaders",
        &global.leader_table,
        leaders.as_ref().map(|rows| {
            let live = rows.iter().filter(|r| r.live).count();
            format!("{live} of {} fleets led", rows.len())
        }),
    );
    if let Some(rows) = &leaders {
        print!("{}", leaders_table(rows, &view));
        println!();
    }
    heading(
        "Members",
        &global.processes_table,
        members.as_ref().map(|rows| {
            let live = rows.iter().filter(|r| r.live).count();
            let units: i64 = rows
                .iter()
                .filter(|r| r.live)
                .map(|r| i64::from(r.units))
                .sum();
            format!(
                "{live} live of {} processes, {units} units owned by live ones",
                rows.len()
            )
        }),
    );
    if let Some(rows) = &members {
        print!("{}", members_table(rows, &view));
        println!();
    }
    heading(
        "Jobs",
        &global.ticks_table,
        jobs.as_ref().map(|rows| {
            let busy = rows.iter().filter(|r| r.busy).count();
            format!("{busy} busy of {} jobs", rows.len())
        }),
    );
    if let Some(rows) = &jobs {
        print!("{}", jobs_table(rows, &view));
    }
    if !missing.is_empty() {
        println!(
            "\nNot in this database (primitives this application does not use, or tables of other \
             names): {}",
            missing.join(", ")
        );
    }
    Ok(0)
}

fn leases_table(rows: &[pgtenure::LeaseInfo], view: &View) -> String {
    let mut headers = vec![
        "KEY",
        "OWNER",
        "TOKEN",
        "HELD",
        "EXPIRES",
        "AGE",
        "SUPERSEDED",
    ];
    if view.wide {
        headers.extend(["ACQUIRED_AT", "HELD_UNTIL"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.key.clone(),
            r.owner.clone(),
            r.token.to_string(),
            yes_no(r.live),
            relative(r.held_until, view.now),
            age(r.acquired_at, view.now),
            yes_no(r.superseded),
        ];
        if view.wide {
            row.extend([time(r.acquired_at), time(r.held_until)]);
        }
        t.row(row);
    }
    t.render()
}

fn leases_json(rows: &[pgtenure::LeaseInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "key": r.key,
                "owner": r.owner,
                "token": r.token,
                "live": r.live,
                "acquired_at": time(r.acquired_at),
                "held_until": time(r.held_until),
                "superseded": r.superseded,
            })
        })
        .collect()
}

fn leaders_table(rows: &[pgtenure::LeaderInfo], view: &View) -> String {
    let mut headers = vec![
        "NAME",
        "HOLDER",
        "TERM",
        "LEADS",
        "EXPIRES",
        "AGE",
        "RESIGN_REQUESTED",
    ];
    if view.wide {
        headers.extend(["ELECTED_AT", "EXPIRES_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.name.clone(),
            r.holder.clone(),
            r.term.to_string(),
            yes_no(r.live),
            relative(r.expires_at, view.now),
            age(r.elected_at, view.now),
            yes_no(r.resign_requested),
        ];
        if view.wide {
            row.extend([time(r.elected_at), time(r.expires_at)]);
        }
        t.row(row);
    }
    t.render()
}

fn leaders_json(rows: &[pgtenure::LeaderInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "name": r.name,
                "holder": r.holder,
                "term": r.term,
                "live": r.live,
                "elected_at": time(r.elected_at),
                "expires_at": time(r.expires_at),
                "resign_requested": r.resign_requested,
            })
        })
        .collect()
}

fn members_table(rows: &[pgtenure::membership::ProcessInfo], view: &View) -> String {
    let mut headers = vec![
        "PROCESS", "HOSTNAME", "VERSION", "LIVE", "UNITS", "WEIGHT", "EXPIRES", "AGE",
    ];
    if view.wide {
        headers.extend(["STARTED_AT", "EXPIRES_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            view.id(&r.id),
            r.hostname.clone(),
            r.version.clone(),
            yes_no(r.live),
            r.units.to_string(),
            r.weight.to_string(),
            relative(r.expires_at, view.now),
            age(r.started_at, view.now),
        ];
        if view.wide {
            row.extend([time(r.started_at), time(r.expires_at)]);
        }
        t.row(row);
    }
    t.render()
}

fn members_json(rows: &[pgtenure::membership::ProcessInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "id": r.id,
                "hostname": r.hostname,
                "version": r.version,
                "live": r.live,
                "units": r.units,
                "weight": r.weight,
                "started_at": time(r.started_at),
                "expires_at": time(r.expires_at),
            })
        })
        .collect()
}

fn units_table(rows: &[pgtenure::membership::Assignment], view: &View) -> String {
    let mut headers = vec![
        "TENANT",
        "SHARD",
        "WEIGHT",
        "OWNER",
        "OWNER_LIVE",
        "TOKEN",
        "AGE",
    ];
    if view.wide {
        headers.push("CLAIMED_AT");
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.unit.tenant.clone(),
            r.unit.shard.to_string(),
            r.weight.to_string(),
            r.owner
                .as_deref()
                .map_or_else(|| "-".into(), |o| view.id(o)),
            yes_no(r.owner_live),
            r.token.map_or_else(|| "-".into(), |t| t.to_string()),
            r.claimed_at
                .map_or_else(|| "-".into(), |at| age(at, view.now)),
        ];
        if view.wide {
            row.push(opt_time(r.claimed_at));
        }
        t.row(row);
    }
    t.render()
}

fn units_json(rows: &[pgtenure::membership::Assignment]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "tenant": r.unit.tenant,
                "shard": r.unit.shard,
                "weight": r.weight,
                "owner": r.owner,
                "owner_live": r.owner_live,
                "token": r.token,
                "claimed_at": json_time(r.claimed_at),
            })
        })
        .collect()
}

fn jobs_table(rows: &[pgtenure::JobInfo], view: &View) -> String {
    let mut headers = vec!["JOB", "LAST_TICK", "OWNER", "TOKEN", "BUSY", "BUSY_UNTIL"];
    if view.wide {
        headers.extend(["TICK", "BUSY_UNTIL_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.job_id.clone(),
            relative(r.tick, view.now),
            r.owner.clone(),
            r.token.to_string(),
            yes_no(r.busy),
            r.busy_until
                .filter(|_| r.busy)
                .map_or_else(|| "-".into(), |until| relative(until, view.now)),
        ];
        if view.wide {
            row.extend([time(r.tick), opt_time(r.busy_until)]);
        }
        t.row(row);
    }
    t.render()
}

fn jobs_json(rows: &[pgtenure::JobInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "job_id": r.job_id,
                "tick": time(r.tick),
                "owner": r.owner,
                "token": r.token,
                "busy": r.busy,
                "busy_until": json_time(r.busy_until),
            })
        })
        .collect()
}
