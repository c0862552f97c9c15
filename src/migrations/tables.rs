//! Which tables [`plan`](super::plan()) and [`migrate`](super::migrate()) work on.

use super::kind::Kind;
use crate::error::{Error, Result};
use crate::table_name::TableName;

/// The tables [`plan`] and [`migrate`] work on: every kind, each under its default name unless
/// named otherwise.
///
/// [`plan`]: super::plan()
/// [`migrate`]: super::migrate()
#[derive(Debug, Clone)]
pub struct Tables {
    pub(super) tables: Vec<(Kind, TableName)>,
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
                (Kind::Semaphores, table(crate::semaphores::DEFAULT_TABLE)),
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
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_tick_claims(self, name: &str) -> Result<Tables> {
        self.with(Kind::TickClaims, name)
    }

    /// The fire claims table. Defaults to `pgtenure_fire_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_fire_claims(self, name: &str) -> Result<Tables> {
        self.with(Kind::FireClaims, name)
    }

    /// The leases table. Defaults to `pgtenure_leases`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_leases(self, name: &str) -> Result<Tables> {
        self.with(Kind::Leases, name)
    }

    /// The leader table. Defaults to `pgtenure_leader`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_leader(self, name: &str) -> Result<Tables> {
        self.with(Kind::Elector, name)
    }

    /// The semaphores table. Defaults to `pgtenure_semaphores`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_semaphores(self, name: &str) -> Result<Tables> {
        self.with(Kind::Semaphores, name)
    }

    /// The membership processes and units tables. Default to `pgtenure_processes` and
    /// `pgtenure_units`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier or both are the same.
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
