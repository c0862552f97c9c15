//! A handle's check that its tables are at the versions its statements need, and the error when
//! one is older.

use std::sync::atomic::{AtomicBool, Ordering};

use super::found::Found;
use super::kind::Kind;
use crate::db::Db;
use crate::error::{Error, ErrorKind, Result};
use crate::statement::Statement;
use crate::table_name::TableName;

pub(crate) const VERSION_SQL: &str = include_str!("../../sql/schema/version.sql");

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
