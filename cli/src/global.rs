//! The flags every subcommand shares, and the database they name.

use std::time::Duration;

use clap::Args;
use pgtenure::Db;

use crate::duration;

#[derive(Args, Debug)]
pub(crate) struct Global {
    /// The database: a postgres:// URL or key=value connection string. Without it, libpq's
    /// environment names the database as it does for psql (PGHOST, PGPORT, PGUSER, PGDATABASE,
    /// PGSERVICE; the password from PGPASSWORD or ~/.pgpass; TLS from PGSSLMODE, PGSSLROOTCERT,
    /// PGSSLCERT, PGSSLKEY), and fills what the URL leaves unset.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub(crate) url: Option<String>,
    /// Print JSON instead of a table (the same as `-o json`).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// How listings print: `table` (times relative to the database clock), `wide` (also the
    /// absolute times and full ids) or `json`.
    #[arg(short, long, global = true, value_enum, default_value = "table")]
    pub(crate) output: Output,
    /// Print the listing again every `--interval`, until interrupted.
    #[arg(short, long, global = true)]
    pub(crate) watch: bool,
    /// How often `--watch` prints the listing again, e.g. 2s or 500ms (100ms or more).
    #[arg(long, global = true, default_value = "2s", value_parser = parse_interval)]
    pub(crate) interval: Duration,
    /// The leases table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_LEASES_TABLE", default_value = pgtenure::leases::DEFAULT_TABLE)]
    pub(crate) leases_table: String,
    /// The leader table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_LEADER_TABLE", default_value = pgtenure::elector::DEFAULT_TABLE)]
    pub(crate) leader_table: String,
    /// The tick claims (jobs) table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_TICKS_TABLE", default_value = pgtenure::tick_claims::DEFAULT_TABLE)]
    pub(crate) ticks_table: String,
    /// The membership processes table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_PROCESSES_TABLE", default_value = pgtenure::membership::DEFAULT_PROCESSES_TABLE)]
    pub(crate) processes_table: String,
    /// The membership units table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_UNITS_TABLE", default_value = pgtenure::membership::DEFAULT_UNITS_TABLE)]
    pub(crate) units_table: String,
    /// The semaphores table. Accepted by every subcommand.
    #[arg(long, global = true, env = "PGTENURE_SEMAPHORES_TABLE", default_value = pgtenure::semaphores::DEFAULT_TABLE)]
    pub(crate) semaphores_table: String,
}

impl Global {
    /// Whether listings print JSON (`--json` or `-o json`).
    pub(crate) fn as_json(&self) -> bool {
        self.json || self.output == Output::Json
    }
}

/// The libpq variables that name a database: with one set, no URL is needed.
const NAMING_VARIABLES: &[&str] = &[
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGSERVICE",
];

/// The builder for the database given: `--url` (or DATABASE_URL), completed from libpq's
/// environment; else libpq's environment alone when it names a database.
pub(crate) fn builder(global: &Global) -> Result<pgtenure::DbBuilder, String> {
    let url = global.url.as_deref().unwrap_or_default();
    if !url.trim().is_empty() {
        return Db::builder(url).map_err(|e| e.to_string());
    }
    if NAMING_VARIABLES
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
    {
        return pgtenure::DbBuilder::from_env().map_err(|e| e.to_string());
    }
    Err(
        "no database given; pass --url postgres://user@host:port/database, set DATABASE_URL, or \
         set libpq's PGHOST, PGDATABASE, PGUSER or PGSERVICE as for psql"
            .into(),
    )
}

/// A `--watch` interval: 100 ms or more (a listing is several statements; faster would load the
/// database for a screen nobody reads that fast).
fn parse_interval(text: &str) -> Result<Duration, String> {
    duration::at_least_100ms("the interval", text)
}

/// How listings print.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Table,
    Wide,
    Json,
}
