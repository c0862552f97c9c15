//! The registry of units a fleet shares: adding, removing and weighting them, and what operators
//! read of it (the rows they read are in `views.rs`).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use super::sql::{Batch, Statements};
use super::unit::Unit;
use super::views::{Assignment, ProcessInfo, Unowned};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::input::check_key;
use crate::table_name::TableName;

/// Registers the units a fleet shares and sets their weights.
///
/// Cheap to clone, `Send` and `Sync`.
#[derive(Clone)]
pub struct Units {
    pub(super) db: Db,
    pub(super) sql: Arc<Statements>,
}

impl Units {
    /// Units in `pgtenure_units`, processes in `pgtenure_processes`.
    pub fn new(db: &Db) -> Units {
        Units {
            db: db.clone(),
            sql: Statements::default_tables(),
        }
    }

    /// Uses other tables (each `table` or `schema.table`); use the same on every [`Leaser`](super::Leaser).
    /// Defaults to `pgtenure_processes` and `pgtenure_units`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier, or the two tables (or the units table's derived index names) collide.
    pub fn with_tables(mut self, processes: &str, units: &str) -> Result<Units> {
        self.sql = Statements::new(TableName::parse(processes)?, TableName::parse(units)?)?;
        Ok(self)
    }

    /// Creates both tables and the units' indexes, or brings them to this version's schema (see
    /// [`crate::migrations`]); tables at this version are left as they are. Safe from every
    /// instance at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Schema`](crate::ErrorKind::Schema) when a table was migrated by a newer
    /// pgtenure (nothing is changed; this one's handles still use it) or is recorded as another
    /// kind of pgtenure table; a database or connection error: creating and migrating need
    /// `CREATE` on the schema, which must exist, and ownership of the table.
    pub fn create_tables(&self) -> Result<()> {
        self.sql.create_tables(&self.db)
    }

    /// Registers units with weight 1 (one statement for the batch); existing units are left as they
    /// are. A unit removed while its owner still had it is registered again in place: the same
    /// owner keeps it (it re-reads it at its next tick), never a second claimable copy beside it.
    /// Returns how many were new or registered again.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when a
    /// tenant is bad; otherwise a database or connection error.
    pub fn add(&self, units: &[Unit]) -> Result<u64> {
        self.batch("add units", false, units)
    }

    /// Unregisters units (one statement, then one that tells their owners). An owned unit is
    /// disabled and marked removed: nobody else can claim it, its owner learns it at its next tick
    /// and deletes it when it gives it back (a dead owner's are deleted by the sweep); until then
    /// adding it again gives it back to that owner, never to a second one. An unowned unit is deleted
    /// at once. Returns how many were registered.
    ///
    /// # Errors
    ///
    /// As [`Units::add`]. A failure after the units were removed (telling their owners) is reported
    /// too; calling `remove` again tells them again.
    pub fn remove(&self, units: &[Unit]) -> Result<u64> {
        self.batch("remove units", true, units)
    }

    fn batch(&self, context: &str, remove: bool, units: &[Unit]) -> Result<u64> {
        for unit in units {
            check_key("tenant", &unit.tenant)?;
        }
        if units.is_empty() {
            return Ok(0);
        }
        // In key order, once each: concurrent batches lock their rows in the same order, and a unit
        // named twice is one unit.
        let units: BTreeSet<&Unit> = units.iter().collect();
        let (changed, owners) =
            self.sql
                .add_or_remove(&self.db, context, remove, &Batch::of(units))?;
        self.tell_owners(context, &owners)?;
        Ok(changed)
    }

    /// Moves the change counters of `owners`, so each re-reads its units at its next tick; a
    /// statement of its own (see `sql/membership/bump_changes.sql`).
    fn tell_owners(&self, context: &str, owners: &[String]) -> Result<()> {
        if owners.is_empty() {
            return Ok(());
        }
        let context = format!("{context}: tell their owners");
        self.sql.bump_changes(&self.db, &context, owners)
    }

    /// Sets a unit's weight: its share of a process's fair share. 0 disables it: it is never claimed,
    /// and its owner gives it back at its next tick. Returns whether the unit is registered (a
    /// removed unit is not).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, for a
    /// negative weight or a bad tenant; otherwise a database or connection error (also one telling
    /// the owner, after the weight was set: setting it again tells it again).
    pub fn set_weight(&self, unit: &Unit, weight: i32) -> Result<bool> {
        check_key("tenant", &unit.tenant)?;
        if weight < 0 {
            return Err(Error::invalid_input(format!(
                "weight {weight} of unit {unit} is negative; use 0 to disable a unit"
            )));
        }
        let Some(owner) = self.sql.set_weight(&self.db, unit, weight)? else {
            return Ok(false);
        };
        let owners: Vec<String> = owner.into_iter().collect();
        self.tell_owners("set unit weight", &owners)?;
        Ok(true)
    }
}

/// What operators look at: [`Assignment`]s, [`ProcessInfo`]s, and the [`Unowned`] units.
impl Units {
    /// Every registered unit with its weight, owner and token, in unit order, in one statement that
    /// reads the whole units table (an operator's view, not something to poll in a loop).
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn assignments(&self) -> Result<Vec<Assignment>> {
        self.sql.assignments(&self.db)
    }

    /// Every process row, live or expired (until the sweep deletes it), oldest first.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.sql.processes(&self.db)
    }

    /// How many enabled units no live process owns, and their weight: those never claimed or
    /// released, and those of expired processes. A fleet whose processes are live and keep up
    /// brings it to 0 within a rebalance; a count that stays above 0 means work nobody does. One
    /// statement that reads only the claimable units (through the tables' indexes), so it is cheap
    /// at any number of owned units: something a health check or an exporter may poll.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the tables do not exist).
    pub fn unowned(&self) -> Result<Unowned> {
        self.sql.unowned(&self.db)
    }
}

impl fmt::Debug for Units {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Units")
            .field("processes", &self.sql.processes)
            .field("units", &self.sql.units)
            .finish()
    }
}
