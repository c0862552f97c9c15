//! A handle's check that its tables are at the versions its statements need, and the error when
//! one is older.

use std::sync::atomic::{AtomicBool, Ordering};

use super::found::Found;
use super::kind::Kind;
use crate::db::{Db, Policy};
use crate::error::{Error, ErrorKind, Result};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::TableName;

pub(super) const VERSION_SQL: &str = include_str!("../../sql/schema/version.sql");

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
            check_version(db, *kind, table, &self.statement)?;
        }
        self.passed.store(true, Ordering::Release);
        Ok(())
    }
}

/// `Ok` when `kind`'s `table` is at least at the version its statements need, or missing (its
/// statements say so); read once per `Db` and table through `statement`
/// (`sql/schema/version.sql`), in the connection's statement mode.
fn check_version(
    db: &Db,
    kind: Kind,
    table: &TableName,
    statement: &Statement<(String, Vec<String>)>,
) -> Result<()> {
    if db.schema_checks().has_passed(kind.name(), table) {
        return Ok(());
    }
    let context = format!("check the {} table's schema version", kind.name());
    let relations = kind.marker_relations(table);
    let row = db.query_one(
        &context,
        Policy::IDEMPOTENT,
        statement,
        &(table.quoted(), relations),
    )?;
    let read = Read::server(&row, &context, &"the catalog");
    let comment: Option<String> = read.column("comment")?;
    let columns: Vec<String> = read.column("columns")?;
    let present: Vec<String> = read.column("relations")?;
    let found = Found::read(
        kind,
        table,
        read.column("present")?,
        comment.as_deref(),
        &columns,
        &present,
    )?;
    match found {
        // Not cached: the statements report the missing table, until it is made.
        Found::Absent => Ok(()),
        Found::Recorded(v) | Found::Unrecorded(v) | Found::Incomplete { columns: v, .. }
            if v < kind.needed() =>
        {
            Err(too_old(kind, table, found))
        }
        Found::Unrecorded(v) => {
            log::info!(target: "pgtenure::db", "table {table} has no schema version record; its columns are those of version {v} of the {} table (run the migrations to record it)", kind.name());
            db.schema_checks().passed(kind.name(), table);
            Ok(())
        }
        Found::Recorded(_) | Found::Incomplete { .. } => {
            db.schema_checks().passed(kind.name(), table);
            Ok(())
        }
    }
}

/// The error of a handle whose table is older than its statements need.
fn too_old(kind: Kind, table: &TableName, found: Found) -> Error {
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
