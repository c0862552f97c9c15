//! The fire-claim statements, rendered once for a table, and one function per operation.

use std::sync::Arc;

use crate::db::{Db, Policy};
use crate::error::Result;
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const CLAIM: &str = include_str!("../../sql/fire_claims/claim.sql");
const PURGE: &str = include_str!("../../sql/fire_claims/purge.sql");

/// The statements, rendered once for a table, each typed by its parameters.
pub(super) struct Statements {
    pub(super) table: TableName,
    /// The check of the table's schema version before the first statement.
    gate: Gate,
    claim: Statement<Claim<'static>>,
    /// The age in microseconds of the claims to delete.
    purge: Statement<(i64,)>,
}

crate::params! {
    /// A claim's parameters (`sql/fire_claims/claim.sql`).
    struct Claim<'a> {
        key: &'a str,
        holder: &'a str,
        ttl_us: i64,
        /// Finds its own win when the claim is sent again.
        claim_id: i64,
    }
}

impl Statements {
    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            gate: Gate::new(vec![(Kind::FireClaims, table.clone())]),
            claim: Statement::new(render(CLAIM, &table)),
            purge: Statement::new(render(PURGE, &table)),
            table,
        })
    }

    /// Whether `holder` won `key` for `ttl_us`; `claim_id` finds its own win when sent again. An
    /// answer whose row cannot be read is an error although the claim may have been won.
    pub(super) fn claim(
        &self,
        db: &Db,
        key: &str,
        holder: &str,
        ttl_us: i64,
        claim_id: i64,
    ) -> Result<bool> {
        self.gate.check(db)?;
        let params = Claim {
            key,
            holder,
            ttl_us,
            claim_id,
        };
        let row = db.query_one("claim fire", Policy::IDEMPOTENT, &self.claim, &params)?;
        Read::new(&row, "claim fire", &self.table).column("won")
    }

    /// How many claims that expired more than `older_us` ago were deleted.
    pub(super) fn purge(&self, db: &Db, older_us: i64) -> Result<i64> {
        self.gate.check(db)?;
        let row = db.query_one("purge fire claims", Policy::ONCE, &self.purge, &(older_us,))?;
        Read::new(&row, "purge fire claims", &self.table).at(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_built_with_its_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let sql = Statements::new(TableName::parse("ops.fires").unwrap());
        assert!(sql.claim.text().contains("\"ops\".\"fires\""));
        assert!(!sql.purge.text().contains("{table"));
    }
}
