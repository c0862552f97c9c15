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

mod companion;
mod found;
mod gate;
mod kind;
mod migrate;
mod plan;
mod tables;

pub(crate) use self::gate::Gate;
pub(crate) use self::kind::Kind;
pub use self::plan::Plan;
pub use self::tables::Tables;
use crate::db::Db;
use crate::error::Result;

/// What [`migrate`] would run on each of `tables`, reading only the catalog: the SQL for a DBA
/// who applies DDL by hand (`pgtenure migrate --dry-run` prints it).
///
/// # Errors
///
/// [`ErrorKind::Schema`] when a table is at a newer version than this build knows, or recorded
/// as another kind of pgtenure table; a database or connection error.
///
/// [`ErrorKind::Schema`]: crate::ErrorKind::Schema
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
///
/// [`ErrorKind::Schema`]: crate::ErrorKind::Schema
pub fn migrate(db: &Db, tables: &Tables) -> Result<Vec<Plan>> {
    plan(db, tables)?;
    tables
        .tables
        .iter()
        .map(|(kind, table)| db.migrate_table(*kind, table))
        .collect()
}
