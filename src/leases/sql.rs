//! The lease statements, rendered once for a table.

use std::sync::Arc;

use postgres::types::Type;

use crate::statement::Statement;
use crate::table_name::{render, TableName};

const CREATE_SEQUENCE: &str = include_str!("../../sql/leases/create_sequence.sql");
const CREATE_TABLE: &str = include_str!("../../sql/leases/create_table.sql");
const ACQUIRE: &str = include_str!("../../sql/leases/acquire.sql");
const RENEW: &str = include_str!("../../sql/leases/renew.sql");
const RENEW_TENURE: &str = include_str!("../../sql/leases/renew_tenure.sql");
const RELEASE: &str = include_str!("../../sql/leases/release.sql");
const RELEASE_AND_SWEEP: &str = include_str!("../../sql/leases/release_and_sweep.sql");
const SUPERSEDE: &str = include_str!("../../sql/leases/supersede.sql");
const FENCE: &str = include_str!("../../sql/leases/fence.sql");
const HOLDER: &str = include_str!("../../sql/leases/holder.sql");
const REFUSAL: &str = include_str!("../../sql/leases/refusal.sql");
const PROMOTION: &str = include_str!("../../sql/schema/promotion.sql");
const LIST: &str = include_str!("../../sql/leases/list.sql");
const FORCE_RELEASE: &str = include_str!("../../sql/leases/force_release.sql");

pub(crate) struct Statements {
    pub(super) table: TableName,
    pub(super) create: [String; 2],
    pub(super) acquire: Statement,
    pub(super) renew: Statement,
    pub(super) renew_tenure: Statement,
    pub(super) release: Statement,
    pub(super) release_and_sweep: Statement,
    pub(super) supersede: Statement,
    pub(super) holder: Statement,
    pub(super) refusal: Statement,
    /// Reads (and records) the table's promotion record before grants.
    pub(super) promotion: Statement,
    pub(super) list: Statement,
    pub(super) force_release: Statement,
    /// Sent unprepared: it runs inside the caller's transaction, where a missing prepared
    /// statement would abort it.
    pub(super) fence: String,
}

impl Statements {
    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            create: [
                render(CREATE_SEQUENCE, &table),
                render(CREATE_TABLE, &table),
            ],
            acquire: Statement::new(
                render(ACQUIRE, &table),
                &[
                    Type::TEXT,
                    Type::TEXT,
                    Type::INT8,
                    Type::BOOL,
                    Type::BOOL,
                    Type::BOOL,
                    Type::INT8,
                    Type::TIMESTAMPTZ,
                    Type::TIMESTAMPTZ,
                ],
            ),
            renew: Statement::new(
                render(RENEW, &table),
                &[Type::TEXT_ARRAY, Type::TEXT, Type::INT8],
            ),
            renew_tenure: Statement::new(
                render(RENEW_TENURE, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8, Type::INT8],
            ),
            release: Statement::new(
                render(RELEASE, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8],
            ),
            release_and_sweep: Statement::new(
                render(RELEASE_AND_SWEEP, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8],
            ),
            supersede: Statement::new(render(SUPERSEDE, &table), &[Type::TEXT]),
            holder: Statement::new(render(HOLDER, &table), &[Type::TEXT]),
            refusal: Statement::new(render(REFUSAL, &table), &[Type::TEXT]),
            promotion: Statement::new(render(PROMOTION, &table), &[Type::INT8]),
            list: Statement::new(render(LIST, &table), &[Type::TEXT]),
            force_release: Statement::new(render(FORCE_RELEASE, &table), &[Type::TEXT, Type::BOOL]),
            fence: render(FENCE, &table),
            table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_named_after_the_table_in_its_schema() {
        let sql = Statements::new(TableName::parse("ops.locks").unwrap());
        assert!(sql.create[0].contains("\"ops\".\"locks_token_seq\""));
        assert!(sql
            .acquire
            .text()
            .contains("nextval('\"ops\".\"locks_token_seq\"')"));
    }
}
