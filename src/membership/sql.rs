//! The membership statements, rendered once for a pair of tables, and the tables' creation.

use std::sync::Arc;

use postgres::types::Type;

use crate::db::{Companion, Db};
use crate::error::{Error, Result};
use crate::statement::Statement;
use crate::table_name::{render_tables, TableName};

/// The processes table unless [`Leaser::with_tables`](super::Leaser::with_tables) names another.
pub const DEFAULT_PROCESSES_TABLE: &str = "pgtenure_processes";
/// The units table unless [`Leaser::with_tables`](super::Leaser::with_tables) names another.
pub const DEFAULT_UNITS_TABLE: &str = "pgtenure_units";

const CREATE_PROCESSES: &str = include_str!("../../sql/membership/create_processes.sql");
const CREATE_UNITS: &str = include_str!("../../sql/membership/create_units.sql");
const CREATE_SEQUENCE: &str = include_str!("../../sql/membership/create_sequence.sql");
const CREATE_OWNER_INDEX: &str = include_str!("../../sql/membership/create_owner_index.sql");
const CREATE_CLAIMABLE_INDEX: &str =
    include_str!("../../sql/membership/create_claimable_index.sql");
const HEARTBEAT: &str = include_str!("../../sql/membership/heartbeat.sql");
const OWNED: &str = include_str!("../../sql/membership/owned.sql");
const STATS: &str = include_str!("../../sql/membership/stats.sql");
const CLAIM: &str = include_str!("../../sql/membership/claim.sql");
const SHED: &str = include_str!("../../sql/membership/shed.sql");
const RELEASE: &str = include_str!("../../sql/membership/release.sql");
const DELETE_PROCESS: &str = include_str!("../../sql/membership/delete_process.sql");
const SWEEP: &str = include_str!("../../sql/membership/sweep.sql");
const ADD_UNITS: &str = include_str!("../../sql/membership/add_units.sql");
const REMOVE_UNITS: &str = include_str!("../../sql/membership/remove_units.sql");
const SET_WEIGHT: &str = include_str!("../../sql/membership/set_weight.sql");
const BUMP_CHANGES: &str = include_str!("../../sql/membership/bump_changes.sql");
const FENCE: &str = include_str!("../../sql/membership/fence.sql");
const ASSIGNMENTS: &str = include_str!("../../sql/membership/assignments.sql");
const PROCESSES: &str = include_str!("../../sql/membership/processes.sql");

pub(super) struct Statements {
    pub(super) processes: TableName,
    pub(super) units: TableName,
    pub(super) create_processes: [String; 1],
    pub(super) create_units: [String; 4],
    pub(super) heartbeat: Statement,
    pub(super) owned: Statement,
    pub(super) stats: Statement,
    pub(super) claim: Statement,
    pub(super) shed: Statement,
    pub(super) release: Statement,
    pub(super) delete_process: Statement,
    pub(super) sweep: Statement,
    pub(super) add_units: Statement,
    pub(super) remove_units: Statement,
    pub(super) set_weight: Statement,
    pub(super) bump_changes: Statement,
    /// Run on the caller's transaction, unprepared (see [`Leaser::fence`](super::Leaser::fence)).
    pub(super) fence: String,
    pub(super) assignments: Statement,
    pub(super) processes_view: Statement,
}

/// The suffixes of the units table's indexes (`{index:owner}`, `{index:claimable}` in `sql/`).
const UNIT_INDEXES: [&str; 2] = ["owner", "claimable"];
/// The suffix of the units table's token sequence (`{units:token_seq}` in `sql/`).
const TOKEN_SEQUENCE: &str = "token_seq";

impl Statements {
    /// Renders the statements for two tables, refusing names that would collide: the units table's
    /// index names are derived from its name, and `CREATE INDEX IF NOT EXISTS` would silently skip
    /// an index whose name the processes table already has.
    pub(super) fn new(processes: TableName, units: TableName) -> Result<Arc<Statements>> {
        if processes == units {
            return Err(Error::invalid_input(format!(
                "the processes and units tables are both named {units}; give them different names"
            )));
        }
        for suffix in UNIT_INDEXES.into_iter().chain([TOKEN_SEQUENCE]) {
            if units.derived(suffix) == processes.quoted()
                || units.derived_unqualified(suffix) == processes.quoted()
            {
                return Err(Error::invalid_input(format!(
                    "the units table {units} names its {suffix} {}, which is the processes \
                     table's name; choose other table names",
                    units.derived_unqualified(suffix)
                )));
            }
        }
        Ok(Statements::render(processes, units))
    }

    pub(super) fn render(processes: TableName, units: TableName) -> Arc<Statements> {
        let both = [("units", &units), ("processes", &processes)];
        let dml = |sql: &str, types: &[Type]| Statement::new(render_tables(sql, &both), types);
        let on = |sql: &str, table: &TableName| render_tables(sql, &[("table", table)]);
        let units_batch = [Type::TEXT_ARRAY, Type::INT4_ARRAY];
        Arc::new(Statements {
            create_processes: [on(CREATE_PROCESSES, &processes)],
            create_units: [
                on(CREATE_UNITS, &units),
                on(CREATE_SEQUENCE, &units),
                on(CREATE_OWNER_INDEX, &units),
                on(CREATE_CLAIMABLE_INDEX, &units),
            ],
            heartbeat: dml(
                HEARTBEAT,
                &[
                    Type::TEXT,
                    Type::INT8,
                    Type::INT4,
                    Type::INT8,
                    Type::TEXT,
                    Type::TEXT,
                ],
            ),
            owned: dml(OWNED, &[Type::TEXT]),
            stats: dml(STATS, &[Type::TEXT]),
            claim: dml(
                CLAIM,
                &[
                    Type::TEXT,
                    Type::INT4,
                    Type::INT8,
                    Type::INT4,
                    Type::INT4,
                    Type::INT8,
                    Type::BOOL,
                ],
            ),
            shed: dml(
                SHED,
                &[
                    Type::TEXT,
                    Type::TEXT_ARRAY,
                    Type::INT4_ARRAY,
                    Type::INT4,
                    Type::INT8,
                ],
            ),
            release: dml(
                RELEASE,
                &[
                    Type::TEXT,
                    Type::TEXT_ARRAY,
                    Type::INT4_ARRAY,
                    Type::INT4,
                    Type::INT8,
                ],
            ),
            delete_process: dml(DELETE_PROCESS, &[Type::TEXT]),
            sweep: dml(SWEEP, &[Type::INT8]),
            add_units: dml(ADD_UNITS, &units_batch),
            remove_units: dml(REMOVE_UNITS, &units_batch),
            set_weight: dml(SET_WEIGHT, &[Type::TEXT, Type::INT4, Type::INT4]),
            bump_changes: dml(BUMP_CHANGES, &[Type::TEXT_ARRAY]),
            fence: render_tables(FENCE, &both),
            assignments: dml(ASSIGNMENTS, &[]),
            processes_view: dml(PROCESSES, &[]),
            processes,
            units,
        })
    }

    pub(super) fn default_tables() -> Arc<Statements> {
        Statements::render(
            TableName::parse(DEFAULT_PROCESSES_TABLE).expect("the default table name is valid"),
            TableName::parse(DEFAULT_UNITS_TABLE).expect("the default table name is valid"),
        )
    }

    pub(super) fn create_tables(&self, db: &Db) -> Result<()> {
        db.create_table(
            "create processes table",
            &self.processes,
            &self.create_processes,
            &[],
        )?;
        let [owner, claimable] =
            UNIT_INDEXES.map(|suffix| Companion::index(self.units.derived(suffix)));
        db.create_table(
            "create units table",
            &self.units,
            &self.create_units,
            &[
                owner,
                claimable,
                Companion::sequence(self.units.derived(TOKEN_SEQUENCE)),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_render_both_tables() {
        let sql = Statements::new(
            TableName::parse("m.procs").unwrap(),
            TableName::parse("m.units").unwrap(),
        )
        .unwrap();
        assert!(sql.claim.text().contains("UPDATE \"m\".\"units\" u"));
        assert!(sql
            .claim
            .text()
            .contains("FROM \"m\".\"procs\" WHERE process_id"));
        assert!(
            sql.create_units[2].contains("INDEX IF NOT EXISTS \"units_owner\" ON \"m\".\"units\"")
        );
        assert!(sql.create_units[1].contains("SEQUENCE IF NOT EXISTS \"m\".\"units_token_seq\""));
        assert!(sql.create_units[3].contains("\"units_claimable\""));
        assert!(!sql.claim.text().contains('{'));
    }
}
