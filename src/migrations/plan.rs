//! What [`plan`](super::plan()) found for one table and the SQL that brings it to this build's
//! version.

use std::fmt;

use super::found::Found;
use super::kind::Kind;
use crate::error::{Error, ErrorKind, Result};
use crate::table_name::TableName;

/// What [`plan`] found for one table and the SQL that brings it to this build's version (empty
/// when it is there already).
///
/// [`plan`]: super::plan()
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

#[cfg(test)]
mod tests {
    use super::*;

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
