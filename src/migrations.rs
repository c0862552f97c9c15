//! Schema versions and migrations: what [`migrate`](crate::migrate) does, and the SQL it would run
//! for a DBA who applies DDL by hand (`pgtenure migrate --dry-run`).
//!
//! Every pgtenure table carries its schema version in its comment
//! (`COMMENT ON TABLE … IS 'pgtenure: leases table, schema version 3 (…)'`): the record moves,
//! is dumped and is dropped with the table, and several sets of tables in one database (tables
//! named per application, or per schema) each have their own. [`migrate`] brings each table to
//! the version this build knows, step by step: each step is idempotent (`ADD COLUMN IF NOT
//! EXISTS`, `CREATE … IF NOT EXISTS`), all of a table's steps and its new record run in one
//! transaction under pgtenure's advisory lock, so every instance may call it at startup at once.
//! A table recorded at a version newer than this build knows is refused ([`ErrorKind::Schema`],
//! nothing changed): a newer pgtenure migrated it.
//!
//! A handle checks its tables once per [`Db`] before its first statement: a table older than its
//! statements need fails that first call with [`ErrorKind::Schema`], naming the table, the version
//! found and the one needed. A table newer than needed is fine: steps only add (columns with
//! defaults, indexes, companion tables), so the previous release keeps working against the next
//! one's schema during a rolling upgrade. A table without a record (made by hand, or by pgtenure
//! before versions were recorded) is taken at the version its columns show. `docs/upgrading.md`
//! lists the versions and their DDL.
//!
//! [`ErrorKind::Schema`]: crate::ErrorKind::Schema

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::db::{Companion, Db};
use crate::error::{Error, ErrorKind, Result};
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const TICKS_CREATE: &str = include_str!("../sql/tick_claims/create_table.sql");
const TICKS_2: &str = include_str!("../sql/tick_claims/upgrade_2.sql");
const FIRES_CREATE: &str = include_str!("../sql/fire_claims/create_table.sql");
const FIRES_INDEX: &str = include_str!("../sql/fire_claims/create_index.sql");
const FIRES_2: &str = include_str!("../sql/fire_claims/upgrade_2.sql");
const LEASES_SEQUENCE: &str = include_str!("../sql/leases/create_sequence.sql");
const LEASES_CREATE: &str = include_str!("../sql/leases/create_table.sql");
const LEASES_3: &str = include_str!("../sql/leases/upgrade_3.sql");
const LEADER_SEQUENCE: &str = include_str!("../sql/elector/create_sequence.sql");
const LEADER_CREATE: &str = include_str!("../sql/elector/create_table.sql");
const LEADER_2: &str = include_str!("../sql/elector/upgrade_2.sql");
const PROCESSES_CREATE: &str = include_str!("../sql/membership/create_processes.sql");
const PROCESSES_2: &str = include_str!("../sql/membership/upgrade_processes_2.sql");
const PROCESSES_3: &str = include_str!("../sql/membership/upgrade_processes_3.sql");
const UNITS_CREATE: &str = include_str!("../sql/membership/create_units.sql");
const UNITS_SEQUENCE: &str = include_str!("../sql/membership/create_sequence.sql");
const UNITS_OWNER_INDEX: &str = include_str!("../sql/membership/create_owner_index.sql");
const UNITS_CLAIMABLE_INDEX: &str = include_str!("../sql/membership/create_claimable_index.sql");
const UNITS_2: &str = include_str!("../sql/membership/upgrade_units_2.sql");
const UNITS_3: &str = include_str!("../sql/membership/upgrade_units_3.sql");
const UNITS_4: &str = include_str!("../sql/membership/upgrade_units_4.sql");
const UNITS_OWN_SEQUENCE: &str = include_str!("../sql/membership/own_sequence.sql");
const CREATE_PROMOTION: &str = include_str!("../sql/schema/create_promotion.sql");
const SEED_PROMOTION: &str = include_str!("../sql/schema/seed_promotion.sql");
pub(crate) const VERSION_SQL: &str = include_str!("../sql/schema/version.sql");

/// What a table is to pgtenure, as its version record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    TickClaims,
    FireClaims,
    Leases,
    Elector,
    Processes,
    Units,
}

/// Something a version added, found in a table without a version record.
enum Marker {
    Column(&'static str),
    /// A relation named after the table (`TableName::derived`).
    Relation(&'static str),
}

impl Kind {
    /// The name in the version record and in [`Plan::kind`].
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::TickClaims => "tick_claims",
            Kind::FireClaims => "fire_claims",
            Kind::Leases => "leases",
            Kind::Elector => "leader",
            Kind::Processes => "processes",
            Kind::Units => "units",
        }
    }

    fn from_name(name: &str) -> Option<Kind> {
        [
            Kind::TickClaims,
            Kind::FireClaims,
            Kind::Leases,
            Kind::Elector,
            Kind::Processes,
            Kind::Units,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// The version this build makes and migrates to.
    pub(crate) fn latest(self) -> u32 {
        match self {
            Kind::TickClaims | Kind::FireClaims => 2,
            Kind::Leases | Kind::Elector | Kind::Processes => 3,
            Kind::Units => 4,
        }
    }

    /// The oldest version this build's statements work with. A release that adds a column its
    /// statements can do without (expand) keeps this below [`Kind::latest`] for a release.
    pub(crate) fn needed(self) -> u32 {
        self.latest()
    }

    /// The oldest build (by the version it migrates to) whose statements still work on a table
    /// at [`Kind::latest`]: every step so far only added, so 1. A release that contracts (drops
    /// or changes what older builds read) raises it, and older builds then refuse the table.
    fn usable_from(self) -> u32 {
        1
    }

    /// The statements that make the table at its latest version, and what it needs beside it.
    fn create(self, table: &TableName, fold: bool) -> Vec<String> {
        let on = |sql: &str| render(sql, table);
        match self {
            Kind::TickClaims => vec![on(TICKS_CREATE)],
            Kind::FireClaims => vec![on(FIRES_CREATE), on(FIRES_INDEX)],
            Kind::Leases => [
                vec![on(LEASES_SEQUENCE), on(LEASES_CREATE)],
                promotion(table, fold),
            ]
            .concat(),
            Kind::Elector => [
                vec![on(LEADER_SEQUENCE), on(LEADER_CREATE)],
                promotion(table, fold),
            ]
            .concat(),
            Kind::Processes => vec![on(PROCESSES_CREATE)],
            Kind::Units => vec![
                on(UNITS_CREATE),
                on(UNITS_SEQUENCE),
                on(UNITS_OWNER_INDEX),
                on(UNITS_CLAIMABLE_INDEX),
            ],
        }
    }

    /// The statements that take the table from `version - 1` to `version`.
    fn step(self, version: u32, table: &TableName, fold: bool) -> Vec<String> {
        let on = |sql: &str| render(sql, table);
        match (self, version) {
            (Kind::TickClaims, 2) => vec![on(TICKS_2)],
            (Kind::FireClaims, 2) => vec![on(FIRES_2)],
            (Kind::Leases, 2) | (Kind::Elector, 3) => promotion(table, fold),
            (Kind::Leases, 3) => vec![on(LEASES_3)],
            (Kind::Elector, 2) => vec![on(LEADER_2)],
            (Kind::Processes, 2) => vec![on(PROCESSES_2)],
            (Kind::Processes, 3) => vec![on(PROCESSES_3)],
            (Kind::Units, 2) => vec![on(UNITS_2)],
            (Kind::Units, 3) => vec![on(UNITS_3)],
            (Kind::Units, 4) => vec![on(UNITS_4), on(UNITS_SEQUENCE), on(UNITS_OWN_SEQUENCE)],
            _ => Vec::new(),
        }
    }

    /// The columns every version of the table has had (version 1's): a table without one of them
    /// is not this kind of pgtenure table, or a column was dropped by hand.
    fn base_columns(self) -> &'static [&'static str] {
        match self {
            Kind::TickClaims => &["job_id", "tick", "busy_until", "owner", "token"],
            Kind::FireClaims => &["fire_key", "holder", "claimed_at", "expires_at"],
            Kind::Leases => &[
                "key",
                "owner",
                "held_until",
                "token",
                "superseded",
                "acquired_at",
            ],
            Kind::Elector => &["name", "holder", "expires_at", "term", "elected_at"],
            Kind::Processes => &[
                "process_id",
                "expires_at",
                "unit_count",
                "weight",
                "hostname",
                "version",
                "started_at",
            ],
            Kind::Units => &[
                "tenant",
                "shard",
                "process_id",
                "claimed_at",
                "weight",
                "slot",
            ],
        }
    }

    /// What each version added that shows in a table without a record.
    fn markers(self) -> &'static [(u32, Marker)] {
        match self {
            Kind::TickClaims | Kind::FireClaims => &[(2, Marker::Column("claim_id"))],
            Kind::Leases => &[
                (2, Marker::Relation("promotion")),
                (3, Marker::Column("managed_token")),
            ],
            Kind::Elector => &[
                (2, Marker::Column("resign_requested")),
                (3, Marker::Relation("promotion")),
            ],
            Kind::Processes => &[
                (2, Marker::Column("changes")),
                (3, Marker::Column("settled")),
            ],
            // Version 2 changed an index's columns: nothing a statement fails without.
            Kind::Units => &[(3, Marker::Column("removed")), (4, Marker::Column("token"))],
        }
    }

    /// The relations [`Kind::markers`] name, as the version statement's `$2`.
    pub(crate) fn marker_relations(self, table: &TableName) -> Vec<String> {
        self.markers()
            .iter()
            .filter_map(|(_, m)| match m {
                Marker::Relation(suffix) => Some(table.derived(suffix)),
                Marker::Column(_) => None,
            })
            .collect()
    }

    /// The indexes, sequences and tables the statements rely on, checked after every migration;
    /// an index or a promotion record dropped by hand is made again (a sequence is not: its
    /// tokens would start again from 1).
    pub(crate) fn companions(self, table: &TableName, fold: bool) -> Vec<Companion> {
        match self {
            Kind::TickClaims | Kind::Processes => Vec::new(),
            Kind::FireClaims => vec![Companion::index(
                table.derived("expires_at"),
                render(FIRES_INDEX, table),
            )],
            Kind::Leases => vec![
                Companion::sequence(table.derived("token_seq")),
                Companion::promotion(table, fold),
            ],
            Kind::Elector => vec![
                Companion::sequence(table.derived("term_seq")),
                Companion::promotion(table, fold),
            ],
            Kind::Units => vec![
                Companion::index(table.derived("owner"), render(UNITS_OWNER_INDEX, table)),
                Companion::index(
                    table.derived("claimable"),
                    render(UNITS_CLAIMABLE_INDEX, table),
                ),
                Companion::sequence(table.derived("token_seq")),
            ],
        }
    }

    /// The version record, as the table's comment.
    fn record(self, table: &TableName, version: u32) -> String {
        format!(
            "COMMENT ON TABLE {} IS 'pgtenure: {} table, schema version {version}, usable by \
             builds of version {} and later (written by pgtenure migrate; keep it: see \
             docs/upgrading.md)'",
            table.quoted(),
            self.name(),
            self.usable_from()
        )
    }
}

fn promotion(table: &TableName, fold: bool) -> Vec<String> {
    let fold = if fold { "true" } else { "false" };
    vec![
        render(CREATE_PROMOTION, table),
        render(SEED_PROMOTION, table).replace("{fold}", fold),
    ]
}

/// What the database says of a table's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No such table.
    Absent,
    /// Its comment records this version.
    Recorded(u32),
    /// No record: the version its columns and companions show.
    Unrecorded(u32),
    /// Its comment records a version, but it lacks what a version up to that one added (a column
    /// dropped by hand, a companion table dropped): the version its columns and companions show.
    Incomplete {
        /// The version the record names.
        recorded: u32,
        /// The version its columns and companions show.
        columns: u32,
    },
}

impl Found {
    /// Reads the version statement's answer (`sql/schema/version.sql`) for `kind`.
    pub(crate) fn read(
        kind: Kind,
        table: &TableName,
        present: bool,
        comment: Option<&str>,
        columns: &[String],
        relations: &[String],
    ) -> Result<Found> {
        if !present {
            return Ok(Found::Absent);
        }
        let record = match comment {
            Some(comment) => parse_record(comment).map_err(|why| {
                Error::new(
                    ErrorKind::Schema,
                    format!(
                        "the comment of table {table} looks like pgtenure's version record but \
                         {why} ({comment:?}); nothing was changed: restore the record pgtenure \
                         wrote, or remove it (COMMENT ON TABLE {} IS NULL) so that the version is \
                         read from the columns, and migrate (see docs/upgrading.md)",
                        table.quoted()
                    ),
                )
            })?,
            None => None,
        };
        let has = |m: &Marker| match m {
            Marker::Column(c) => columns.iter().any(|have| have == c),
            Marker::Relation(suffix) => relations.contains(&table.derived(suffix)),
        };
        // A newer build may have contracted the table (dropped what this one knows): its record
        // says who can use it, below.
        let newer = matches!(record, Some((Some(k), v, _)) if k == kind && v > kind.latest());
        let missing: Vec<&str> = kind
            .base_columns()
            .iter()
            .copied()
            .filter(|c| !columns.iter().any(|have| have == c))
            .collect();
        // (A record of another kind is refused below, as such.)
        let this_kind = record.is_none_or(|(k, _, _)| k == Some(kind));
        if !newer && this_kind && !missing.is_empty() {
            let recorded = match record {
                Some((_, v, _)) => format!(" (recorded at schema version {v})"),
                None => String::new(),
            };
            return Err(Error::new(
                ErrorKind::Schema,
                format!(
                    "table {table}{recorded} lacks the column{} {} that every pgtenure {} table \
                     has: it is another table of that name (another application's?), or a column \
                     was dropped by hand; nothing was changed: name another table for this handle, \
                     or restore the column (see docs/upgrading.md)",
                    if missing.len() == 1 { "" } else { "s" },
                    missing.join(", "),
                    kind.name()
                ),
            ));
        }
        if let Some((recorded, version, usable_from)) = record {
            if recorded != Some(kind) {
                let what = recorded.map_or("an unknown kind of", Kind::name);
                return Err(Error::new(
                    ErrorKind::Schema,
                    format!(
                        "table {table} is recorded as pgtenure's {what} table (schema version \
                         {version}), not a {} table: name another table for this handle",
                        kind.name()
                    ),
                ));
            }
            if usable_from > kind.latest() {
                return Err(Error::new(
                    ErrorKind::Schema,
                    format!(
                        "the {} table {table} is at schema version {version}, which a newer \
                         pgtenure changed so that builds before its version {usable_from} of this \
                         table cannot use it (this one knows {}): upgrade pgtenure",
                        kind.name(),
                        kind.latest()
                    ),
                ));
            }
            // Every mark of the versions up to the recorded one (a version that left none, an
            // index changed, is taken as the record says).
            let complete = kind
                .markers()
                .iter()
                .filter(|(at, _)| *at <= version)
                .all(|(_, m)| has(m));
            if !newer && !complete {
                return Ok(Found::Incomplete {
                    recorded: version,
                    columns: Found::from_marks(kind, version, &has),
                });
            }
            return Ok(Found::Recorded(version));
        }
        Ok(Found::Unrecorded(Found::from_marks(
            kind,
            kind.latest(),
            &has,
        )))
    }

    /// The version the marks of versions up to `upto` show.
    fn from_marks(kind: Kind, upto: u32, has: &dyn Fn(&Marker) -> bool) -> u32 {
        // The last version that left a mark, with every mark up to it there. A version that left
        // none (an index changed) counts only once a later one's mark is found.
        let mut version = 1;
        for v in 2..=upto {
            let marks: Vec<&Marker> = kind
                .markers()
                .iter()
                .filter(|(at, _)| *at == v)
                .map(|(_, m)| m)
                .collect();
            if !marks.iter().all(|m| has(m)) {
                break;
            }
            if !marks.is_empty() {
                version = v;
            }
        }
        version
    }

    fn version(self) -> Option<u32> {
        match self {
            Found::Absent => None,
            Found::Recorded(v) | Found::Unrecorded(v) => Some(v),
            Found::Incomplete { columns, .. } => Some(columns),
        }
    }
}

/// Parses `pgtenure: <kind> table, schema version <n>[, usable by builds of version <m> and
/// later] …`: the kind (`None` when this build does not know it), the version, and the oldest
/// build that can use the table (1 when not said). `Ok(None)`: not a record (another comment);
/// `Err`: a record whose numbers cannot be read (a version out of range, negative, or missing),
/// which is neither taken at face value nor overwritten.
type Record = (Option<Kind>, u32, u32);
fn parse_record(comment: &str) -> std::result::Result<Option<Record>, String> {
    let number = |text: &str, what: &str| -> std::result::Result<(u32, usize), String> {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<u32>() {
            Ok(n) => Ok((n, digits.len())),
            Err(_) if digits.is_empty() => Err(format!("names no {what}")),
            Err(_) => Err(format!("its {what} {digits} is out of range")),
        }
    };
    let Some((kind, rest)) = comment
        .strip_prefix("pgtenure: ")
        .and_then(|rest| rest.split_once(" table, schema version "))
    else {
        return Ok(None);
    };
    let (version, len) = number(rest, "schema version")?;
    let usable_from = match rest[len..].strip_prefix(", usable by builds of version ") {
        Some(from) => number(from, "oldest usable version")?.0,
        None => 1,
    };
    Ok(Some((Kind::from_name(kind), version, usable_from)))
}

/// What [`plan`] found for one table and the SQL that brings it to this build's version (empty
/// when it is there already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    table: String,
    kind: Kind,
    found: Found,
    statements: Vec<String>,
}

impl Plan {
    /// Plans `kind`'s table from what was `found`. A table at a newer version than this build
    /// knows is refused.
    pub(crate) fn new(kind: Kind, table: &TableName, found: Found, fold: bool) -> Result<Plan> {
        let latest = kind.latest();
        let mut statements = Vec::new();
        match found {
            Found::Absent => {
                statements = kind.create(table, fold);
                statements.push(kind.record(table, latest));
            }
            Found::Recorded(v) if v > latest => {
                return Err(Error::new(
                    ErrorKind::Schema,
                    format!(
                        "table {table} is at schema version {v} of the {} table, newer than this \
                         pgtenure knows ({latest}): a newer pgtenure migrated it; upgrade pgtenure \
                         (this one keeps working against it, but cannot migrate it); nothing was \
                         changed",
                        kind.name()
                    ),
                ));
            }
            Found::Recorded(v) if v == latest => {}
            // Without a record, or with one that says more than the table has, every step runs:
            // each is idempotent, so what the table has already stays as it is.
            Found::Recorded(_) | Found::Unrecorded(_) | Found::Incomplete { .. } => {
                let from = match found {
                    Found::Recorded(v) => v + 1,
                    _ => 2,
                };
                for v in from..=latest {
                    statements.extend(kind.step(v, table, fold));
                }
                statements.push(kind.record(table, latest));
            }
        }
        Ok(Plan {
            table: table.to_string(),
            kind,
            found,
            statements,
        })
    }

    /// The table, as named (`table` or `schema.table`).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// What the table is: `tick_claims`, `fire_claims`, `leases`, `leader`, `processes` or `units`.
    pub fn kind(&self) -> &'static str {
        self.kind.name()
    }

    /// Whether the table exists.
    pub fn exists(&self) -> bool {
        self.found != Found::Absent
    }

    /// The version the table's record names; `None` when it has none (or does not exist).
    pub fn recorded_version(&self) -> Option<u32> {
        match self.found {
            Found::Recorded(v) | Found::Incomplete { recorded: v, .. } => Some(v),
            _ => None,
        }
    }

    /// The version the table is at: recorded, or read from its columns when it has no record or
    /// lacks what its record says it has (a column dropped by hand; [`Plan::recorded_version`]
    /// then says more); `None` when it does not exist.
    pub fn version(&self) -> Option<u32> {
        self.found.version()
    }

    /// The version this build migrates it to.
    pub fn target(&self) -> u32 {
        self.kind.latest()
    }

    /// The statements that take it there, in order, each complete (no trailing `;`); empty when
    /// it is there already. The last records the version in the table's comment.
    pub fn statements(&self) -> &[String] {
        &self.statements
    }

    /// Whether nothing needs to run.
    pub fn is_current(&self) -> bool {
        self.statements.is_empty()
    }
}

impl fmt::Display for Plan {
    /// The plan as a SQL script: a comment line saying what was found, then each statement
    /// followed by `;`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found = match self.found {
            Found::Absent => "does not exist".to_owned(),
            Found::Recorded(v) => format!("is at schema version {v}"),
            Found::Unrecorded(v) => format!(
                "has no version record (its columns are those of version {v}; every step runs, \
                 each changing nothing that is there already)"
            ),
            Found::Incomplete { recorded, columns } => format!(
                "records schema version {recorded} but lacks what a later version than \
                 {columns} added (dropped by hand?; every step runs again, each changing nothing \
                 that is there already)"
            ),
        };
        writeln!(
            f,
            "-- {} table {}: {found}; this pgtenure's version is {}",
            self.kind(),
            self.table,
            self.target()
        )?;
        if self.statements.is_empty() {
            return writeln!(f, "-- nothing to do");
        }
        for statement in &self.statements {
            writeln!(f, "{};", statement.trim_end())?;
        }
        Ok(())
    }
}

/// The tables [`plan`] and [`migrate`] work on: every kind, each under its default name unless
/// named otherwise.
#[derive(Debug, Clone)]
pub struct Tables {
    tables: Vec<(Kind, TableName)>,
}

impl Default for Tables {
    fn default() -> Tables {
        let table = |name: &str| TableName::parse(name).expect("the default table names are valid");
        Tables {
            tables: vec![
                (Kind::TickClaims, table(crate::tick_claims::DEFAULT_TABLE)),
                (Kind::FireClaims, table(crate::fire_claims::DEFAULT_TABLE)),
                (Kind::Leases, table(crate::leases::DEFAULT_TABLE)),
                (Kind::Elector, table(crate::elector::DEFAULT_TABLE)),
                (
                    Kind::Processes,
                    table(crate::membership::DEFAULT_PROCESSES_TABLE),
                ),
                (Kind::Units, table(crate::membership::DEFAULT_UNITS_TABLE)),
            ],
        }
    }
}

impl Tables {
    fn with(mut self, kind: Kind, name: &str) -> Result<Tables> {
        let name = TableName::parse(name)?;
        for (k, t) in &mut self.tables {
            if *k == kind {
                *t = name.clone();
            }
        }
        Ok(self)
    }

    /// The tick claims table (`table` or `schema.table`). Defaults to `pgtenure_tick_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the name is not a plain identifier.
    pub fn with_tick_claims(self, name: &str) -> Result<Tables> {
        self.with(Kind::TickClaims, name)
    }

    /// The fire claims table. Defaults to `pgtenure_fire_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the name is not a plain identifier.
    pub fn with_fire_claims(self, name: &str) -> Result<Tables> {
        self.with(Kind::FireClaims, name)
    }

    /// The leases table. Defaults to `pgtenure_leases`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the name is not a plain identifier.
    pub fn with_leases(self, name: &str) -> Result<Tables> {
        self.with(Kind::Leases, name)
    }

    /// The leader table. Defaults to `pgtenure_leader`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the name is not a plain identifier.
    pub fn with_leader(self, name: &str) -> Result<Tables> {
        self.with(Kind::Elector, name)
    }

    /// The membership processes and units tables. Default to `pgtenure_processes` and
    /// `pgtenure_units`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when a name is not a plain identifier or both are the same.
    pub fn with_membership(self, processes: &str, units: &str) -> Result<Tables> {
        if TableName::parse(processes)? == TableName::parse(units)? {
            return Err(Error::invalid_input(format!(
                "the processes and units tables are both named {units}; give them different names"
            )));
        }
        self.with(Kind::Processes, processes)?
            .with(Kind::Units, units)
    }
}

/// What [`migrate`] would run on each of `tables`, reading only the catalog: the SQL for a DBA
/// who applies DDL by hand (`pgtenure migrate --dry-run` prints it).
///
/// # Errors
///
/// [`ErrorKind::Schema`] when a table is at a newer version than this build knows, or recorded
/// as another kind of pgtenure table; a database or connection error.
pub fn plan(db: &Db, tables: &Tables) -> Result<Vec<Plan>> {
    tables
        .tables
        .iter()
        .map(|(kind, table)| db.plan_table(*kind, table))
        .collect()
}

/// Creates or upgrades each of `tables` to the version this build knows, each in one transaction
/// under pgtenure's advisory lock (see the [module docs](self)); returns what it found and ran.
/// Every table is read first: when one is at a newer version than this build knows, nothing is
/// changed.
///
/// Safe when every instance calls it at the same moment: they take the lock in turn, and each
/// finds the table at the version the one before it left.
///
/// # Errors
///
/// [`ErrorKind::Schema`] when a table is at a newer version than this build knows (upgrade
/// pgtenure) or is recorded as another kind of table; a database or connection error (creating
/// and altering need `CREATE` on the schema and ownership of the tables).
pub fn migrate(db: &Db, tables: &Tables) -> Result<Vec<Plan>> {
    plan(db, tables)?;
    tables
        .tables
        .iter()
        .map(|(kind, table)| db.migrate_table(*kind, table))
        .collect()
}

/// A handle's check, once per [`Db`] and table, that its tables are at the versions its statements
/// need; free after it passed.
#[derive(Debug)]
pub(crate) struct Gate {
    tables: Vec<(Kind, TableName)>,
    passed: AtomicBool,
    statement: Statement<(String, Vec<String>)>,
}

impl Gate {
    pub(crate) fn new(tables: Vec<(Kind, TableName)>) -> Gate {
        Gate {
            tables,
            passed: AtomicBool::new(false),
            statement: Statement::new(VERSION_SQL.to_owned()),
        }
    }

    /// `Ok` once every table is at least at the version its kind needs (or is missing: its
    /// statements then say so themselves); [`ErrorKind::Schema`] naming the table, the version
    /// found and the one needed otherwise. Sends one catalog read per table the first time on
    /// each [`Db`]; nothing after it passed.
    pub(crate) fn check(&self, db: &Db) -> Result<()> {
        if self.passed.load(Ordering::Acquire) {
            return Ok(());
        }
        for (kind, table) in &self.tables {
            db.check_version(*kind, table, &self.statement)?;
        }
        self.passed.store(true, Ordering::Release);
        Ok(())
    }
}

/// The error of a handle whose table is older than its statements need.
pub(crate) fn too_old(kind: Kind, table: &TableName, found: Found) -> Error {
    let found = match found {
        Found::Recorded(v) => format!("schema version {v}"),
        Found::Unrecorded(v) => {
            format!("schema version {v} (no version record; read from its columns)")
        }
        Found::Incomplete { recorded, columns } => format!(
            "schema version {columns} (its record says {recorded}, but it lacks what a later \
             version added: dropped by hand?)"
        ),
        Found::Absent => "no table".to_owned(),
    };
    Error::new(
        ErrorKind::Schema,
        format!(
            "the {} table {table} is at {found}, older than this pgtenure needs ({}): run the \
             migrations (pgtenure::migrate, the handle's create_table, or `pgtenure migrate`; \
             see docs/upgrading.md)",
            kind.name(),
            kind.needed()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back() {
        let t = TableName::parse("s.t").unwrap();
        for kind in [Kind::TickClaims, Kind::Leases, Kind::Units] {
            let record = kind.record(&t, 7);
            let comment = record.split('\'').nth(1).unwrap();
            assert_eq!(parse_record(comment), Ok(Some((Some(kind), 7, 1))));
        }
        assert_eq!(parse_record("a table of mine"), Ok(None));
        assert_eq!(parse_record("pgtenure: my notes"), Ok(None));
        assert_eq!(
            parse_record("pgtenure: queue table, schema version 3"),
            Ok(Some((None, 3, 1)))
        );
        assert_eq!(
            parse_record("pgtenure: units table, schema version 12, usable by builds of version 9"),
            Ok(Some((Some(Kind::Units), 12, 9)))
        );
        // Numbers that cannot be read are neither believed nor overwritten.
        for bad in [
            "pgtenure: units table, schema version 99999999999",
            "pgtenure: units table, schema version -3",
            "pgtenure: units table, schema version ",
            "pgtenure: units table, schema version 5, usable by builds of version x",
        ] {
            assert!(parse_record(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions_without_a_record_come_from_the_columns() {
        let t = TableName::parse("p").unwrap();
        let with_base = |kind: Kind, c: &[&str]| {
            kind.base_columns()
                .iter()
                .chain(c)
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
        };
        let cols = |c: &[&str]| with_base(Kind::Processes, c);
        let found = |c: &[&str]| Found::read(Kind::Processes, &t, true, None, &cols(c), &[]);
        assert_eq!(found(&["process_id"]).unwrap(), Found::Unrecorded(1));
        assert_eq!(found(&["changes"]).unwrap(), Found::Unrecorded(2));
        assert_eq!(
            found(&["changes", "settled"]).unwrap(),
            Found::Unrecorded(3)
        );
        // A later column without an earlier one: the earlier step is still missing.
        assert_eq!(found(&["settled"]).unwrap(), Found::Unrecorded(1));
        let units =
            |c: &[&str]| Found::read(Kind::Units, &t, true, None, &with_base(Kind::Units, c), &[]);
        assert_eq!(units(&["slot"]).unwrap(), Found::Unrecorded(1));
        assert_eq!(units(&["removed"]).unwrap(), Found::Unrecorded(3));
        assert_eq!(units(&["removed", "token"]).unwrap(), Found::Unrecorded(4));
        let leases = TableName::parse("l").unwrap();
        let promotion = vec![leases.derived("promotion")];
        assert_eq!(
            Found::read(
                Kind::Leases,
                &leases,
                true,
                None,
                &with_base(Kind::Leases, &[]),
                &promotion
            )
            .unwrap(),
            Found::Unrecorded(2)
        );
        // A record that says more than the table has: the columns tell.
        let v3 = Kind::Processes.record(&t, 3);
        let v3 = v3.split('\'').nth(1).unwrap();
        assert_eq!(
            Found::read(
                Kind::Processes,
                &t,
                true,
                Some(v3),
                &cols(&["changes"]),
                &[]
            )
            .unwrap(),
            Found::Incomplete {
                recorded: 3,
                columns: 2
            }
        );
        // Units version 2 changed an index only: a table recorded at 2 is at 2.
        let units_v2 = Kind::Units.record(&t, 2);
        let units_v2 = units_v2.split('\'').nth(1).unwrap();
        assert_eq!(
            Found::read(
                Kind::Units,
                &t,
                true,
                Some(units_v2),
                &with_base(Kind::Units, &[]),
                &[]
            )
            .unwrap(),
            Found::Recorded(2)
        );
        // Another table of that name: refused, whether recorded or not.
        for comment in [None, Some(v3)] {
            let other = vec!["id".to_owned(), "name".to_owned()];
            let err = Found::read(Kind::Processes, &t, true, comment, &other, &[]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Schema);
            assert!(
                err.to_string().contains("lacks the columns process_id"),
                "{err}"
            );
        }
        let managed = with_base(Kind::Leases, &["managed_token"]);
        assert_eq!(
            Found::read(Kind::Leases, &leases, true, None, &managed, &promotion).unwrap(),
            Found::Unrecorded(3)
        );
        assert_eq!(
            Found::read(Kind::Leases, &leases, true, None, &managed, &[]).unwrap(),
            Found::Unrecorded(1)
        );
    }

    #[test]
    fn a_table_contracted_past_this_build_is_refused() {
        let t = TableName::parse("u").unwrap();
        let newer =
            "pgtenure: units table, schema version 6, usable by builds of version 4 and later";
        assert_eq!(
            Found::read(Kind::Units, &t, true, Some(newer), &[], &[]).unwrap(),
            Found::Recorded(6)
        );
        let contracted = "pgtenure: units table, schema version 7, usable by builds of version 5";
        let err = Found::read(Kind::Units, &t, true, Some(contracted), &[], &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema);
        assert!(err.to_string().contains("upgrade pgtenure"), "{err}");
    }

    #[test]
    fn another_kinds_record_is_refused() {
        let t = TableName::parse("x").unwrap();
        let comment = Kind::Leases.record(&t, 2);
        let comment = comment.split('\'').nth(1).unwrap();
        let err = Found::read(Kind::TickClaims, &t, true, Some(comment), &[], &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema);
        assert!(err.to_string().contains("leases table"), "{err}");
    }

    #[test]
    fn plans_step_from_the_recorded_version_and_refuse_newer() {
        let t = TableName::parse("ops.units").unwrap();
        let plan = Plan::new(Kind::Units, &t, Found::Recorded(2), true).unwrap();
        assert_eq!(plan.statements().len(), 5, "{plan}");
        assert!(plan.statements()[0].contains("ADD COLUMN IF NOT EXISTS removed"));
        assert!(plan.statements()[4].contains("schema version 4"));
        assert!(Plan::new(Kind::Units, &t, Found::Recorded(4), true)
            .unwrap()
            .is_current());
        let err = Plan::new(Kind::Units, &t, Found::Recorded(5), true).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema);
        assert!(err.to_string().contains("upgrade pgtenure"), "{err}");
        let leases = TableName::parse("ops.locks").unwrap();
        let plan = Plan::new(Kind::Leases, &leases, Found::Recorded(2), false).unwrap();
        assert_eq!(plan.statements().len(), 2, "{plan}");
        assert!(plan.statements()[0].contains("ADD COLUMN IF NOT EXISTS managed_token bigint"));
        assert!(plan.statements()[1].contains("leases table, schema version 3"));
        let fresh = Plan::new(Kind::Leases, &t, Found::Absent, false).unwrap();
        assert!(fresh.statements().iter().any(|s| s.contains("_promotion")));
        assert!(fresh.statements()[0].contains("\"ops\".\"units_token_seq\""));
    }
}
