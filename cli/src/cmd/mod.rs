//! The subcommands, one file each: its arguments (a clap `Args` struct) and its `run`, which prints
//! through [`crate::output`] and returns the exit status. `lease-run` is a folder of its own.

mod exporter;
mod jobs;
mod leader;
mod lease;
mod lease_run;
mod leases;
mod members;
mod migrate;
mod semaphores;
mod status;
mod units;

use clap::Subcommand;
use pgtenure::membership::Units;
use pgtenure::semaphores::Semaphore;
use pgtenure::{elector::Elector, leases::Leases, tick_claims::TickClaims, Db, Error};

use crate::{Failure, Global};

pub(crate) use self::exporter::ExporterArgs;
pub(crate) use self::jobs::JobsArgs;
pub(crate) use self::leader::LeaderArgs;
pub(crate) use self::lease::LeaseArgs;
pub(crate) use self::lease_run::LeaseRunArgs;
pub(crate) use self::leases::LeasesArgs;
pub(crate) use self::members::MembersArgs;
pub(crate) use self::migrate::MigrateArgs;
pub(crate) use self::semaphores::SemaphoresArgs;
pub(crate) use self::status::StatusArgs;
pub(crate) use self::units::UnitsArgs;

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Everything at a glance: leases, leaders, members with their unit counts, jobs, permits.
    Status(StatusArgs),
    /// Every lease row, live or lapsed.
    Leases(LeasesArgs),
    /// Every live semaphore permit: key, slot, owner, token, until when.
    Semaphores(SemaphoresArgs),
    /// One lease: show it, or release it whoever holds it.
    Lease(LeaseArgs),
    /// Who leads each fleet; or ask a leader to step down.
    Leader(LeaderArgs),
    /// Every membership process, live or expired, with the units it owns.
    Members(MembersArgs),
    /// Every registered unit and its owner.
    Units(UnitsArgs),
    /// Every recurring job's last tick, who claimed it and whether it is busy.
    Jobs(JobsArgs),
    /// Run CMD only while holding the lease KEY (flock across machines), or one of its --permits N.
    #[command(after_help = lease_run::EXIT_HELP)]
    LeaseRun(LeaseRunArgs),
    /// Serve /metrics (Prometheus) and / (a status page) from the tables, until interrupted.
    Exporter(ExporterArgs),
    /// Create pgtenure's tables or bring them to this version's schema; --dry-run prints the SQL.
    #[command(
        after_help = "Safe while instances run, and from several at once (each table in one \
                            transaction under pgtenure's advisory lock). A table migrated by a \
                            newer pgtenure is refused and nothing is changed. The table flags name \
                            the tables; see docs/upgrading.md."
    )]
    Migrate(MigrateArgs),
}

impl Command {
    /// Runs the subcommand on `db`: the exit status, or the failure to report (exit 1).
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        match self {
            Command::Status(args) => args.run(db, global),
            Command::Leases(args) => args.run(db, global),
            Command::Semaphores(args) => args.run(db, global),
            Command::Lease(args) => args.run(db, global),
            Command::Leader(args) => args.run(db, global),
            Command::Members(args) => args.run(db, global),
            Command::Units(args) => args.run(db, global),
            Command::Jobs(args) => args.run(db, global),
            Command::LeaseRun(args) => args.run(db, global),
            Command::Exporter(args) => args.run(db, global),
            Command::Migrate(args) => args.run(db, global),
        }
    }

    /// Checks the subcommand's own arguments that the library would refuse (a lease key, a fleet
    /// name), on a pool that has connected nothing yet.
    pub(crate) fn check(&self, db: &Db, global: &Global) -> Result<(), String> {
        match self {
            Command::Migrate(args) => args.tables(global).map(drop).map_err(|e| e.to_string()),
            Command::Lease(args) => args.check(),
            Command::Leader(args) => args.check(db).map_err(|e| e.to_string()),
            _ => Ok(()),
        }
    }

    /// Whether the subcommand serves for long and must start while the database is down (its
    /// pool connects on first use).
    pub(crate) fn serves(&self) -> bool {
        matches!(self, Command::Exporter(_))
    }

    /// Whether the subcommand only lists (so it may be watched).
    pub(crate) fn lists(&self) -> bool {
        match self {
            Command::Status(_)
            | Command::Leases(_)
            | Command::Semaphores(_)
            | Command::Members(_)
            | Command::Units(_)
            | Command::Jobs(_) => true,
            Command::Lease(args) => args.lists(),
            Command::Leader(args) => args.lists(),
            Command::LeaseRun(_) | Command::Exporter(_) | Command::Migrate(_) => false,
        }
    }

    /// `pgtenure` and the subcommand, as the command's connections name themselves: printable
    /// ASCII, at most 63 bytes (what the server keeps).
    pub(crate) fn application_name(&self) -> String {
        format!("pgtenure {}", self.role())
            .chars()
            .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
            .take(63)
            .collect()
    }

    /// What this run does, for its application_name.
    fn role(&self) -> String {
        match self {
            Command::Status(_) => "status".to_owned(),
            Command::Leases(_) => "leases".to_owned(),
            Command::Semaphores(_) => "semaphores".to_owned(),
            Command::Lease(args) => args.role(),
            Command::Leader(args) => args.role(),
            Command::Members(_) => "members".to_owned(),
            Command::Units(_) => "units".to_owned(),
            Command::Jobs(_) => "jobs".to_owned(),
            Command::LeaseRun(args) => format!("lease-run {}", args.key()),
            Command::Exporter(_) => "exporter".to_owned(),
            Command::Migrate(_) => "migrate".to_owned(),
        }
    }
}

/// The handles on the tables the global flags name, as the subcommands open them.
impl Global {
    /// The leases on `--leases-table`.
    pub(crate) fn leases(&self, db: &Db) -> Result<Leases, Error> {
        Leases::new(db).with_table(&self.leases_table)
    }

    /// The elector on `--leader-table`.
    pub(crate) fn elector(&self, db: &Db) -> Result<Elector, Error> {
        Elector::new(db).with_table(&self.leader_table)
    }

    /// The tick claims on `--ticks-table`.
    pub(crate) fn ticks(&self, db: &Db) -> Result<TickClaims, Error> {
        TickClaims::new(db).with_table(&self.ticks_table)
    }

    /// The membership units on `--processes-table` and `--units-table`.
    pub(crate) fn units(&self, db: &Db) -> Result<Units, Error> {
        Units::new(db).with_tables(&self.processes_table, &self.units_table)
    }

    /// The semaphores on `--semaphores-table`.
    pub(crate) fn semaphores(&self, db: &Db) -> Result<Semaphore, Error> {
        Semaphore::new(db).with_table(&self.semaphores_table)
    }
}
