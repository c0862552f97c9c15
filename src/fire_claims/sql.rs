//! The fire-claim statements, rendered once for a table, and one function per operation.

use std::sync::Arc;

use crate::db::{Db, Policy};
use crate::error::Result;
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const CREATE_TABLE: &str = include_str!("../../sql/fire_claims/create_table.sql");
const CREATE_INDEX: &str = include_str!("../../sql/fire_claims/create_index.sql");
const CLAIM: &str = include_str!("../../sql/fire_claims/claim.sql");
const PURGE: &str = include_str!("../../sql/fire_claims/purge.sql");

pub(super) struct Statements {
    pub(super) table: TableName,
    pub(super) create: [String; 2],
    claim: Statement,
    purge: Statement,
}

impl Statements {
    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            create: [render(CREATE_TABLE, &table), render(CREATE_INDEX, &table)],
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
        let params = (key, holder, ttl_us, claim_id);
        let row = db.query_one("claim fire", Policy::IDEMPOTENT, &self.claim, &params)?;
        Read::new(&row, "claim fire", &self.table).column("won")
    }

    /// How many claims that expired more than `older_us` ago were deleted.
    pub(super) fn purge(&self, db: &Db, older_us: i64) -> Result<i64> {
        let row = db.query_one("purge fire claims", Policy::ONCE, &self.purge, &(older_us,))?;
        Read::new(&row, "purge fire claims", &self.table).at(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_name_is_unqualified_and_table_is_qualified() {
        let sql = Statements::new(TableName::parse("ops.fires").unwrap());
        assert!(
            sql.create[1].contains("INDEX IF NOT EXISTS \"fires_expires_at\" ON \"ops\".\"fires\"")
        );
    }
}
