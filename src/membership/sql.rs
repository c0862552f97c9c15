//! The membership statements, rendered once for a pair of tables, one function per operation, and
//! the tables' creation.

use std::sync::Arc;

use postgres::Row;

use super::leaser::Sweep;
use super::local::{Digest, Hold};
use super::unit::Unit;
use super::views::{Assignment, ProcessInfo, Unowned};
use crate::db::{Companion, Db, Policy};
use crate::error::{Error, Result};
use crate::statement::{in_transaction, Statement};
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
const UNOWNED: &str = include_str!("../../sql/membership/unowned.sql");

pub(super) struct Statements {
    pub(super) processes: TableName,
    pub(super) units: TableName,
    pub(super) create_processes: [String; 1],
    pub(super) create_units: [String; 4],
    heartbeat: Statement,
    owned: Statement,
    stats: Statement,
    claim: Statement,
    shed: Statement,
    release: Statement,
    delete_process: Statement,
    sweep: Statement,
    add_units: Statement,
    remove_units: Statement,
    set_weight: Statement,
    bump_changes: Statement,
    /// Run on the caller's transaction, unprepared (see [`Leaser::fence`](super::Leaser::fence)).
    fence: String,
    assignments: Statement,
    processes_view: Statement,
    unowned: Statement,
}

/// The stats statement's answer (`sql/membership/stats.sql`).
pub(super) struct Stats {
    /// Live processes, this one included if live.
    pub(super) live: i64,
    /// Whether this process's row is live, by the database clock.
    pub(super) live_self: bool,
    /// The other live processes and the weight each reports, by process id.
    pub(super) others: Vec<(String, i64)>,
    /// Whether each of `others` has settled (heartbeated a second time), in the same order.
    pub(super) others_settled: Vec<bool>,
    /// Whether this process's row has settled.
    pub(super) settled_self: bool,
    /// Weight nobody live owns: unowned units and those of expired processes.
    pub(super) claimable: i64,
    /// The process row's counter of changes others made to its units.
    pub(super) changes: Option<i64>,
    /// The digest of the unit rows that name this process.
    pub(super) digest: Digest,
}

/// A heartbeat's parameters (`sql/membership/heartbeat.sql`).
pub(super) struct Heartbeat<'a> {
    pub(super) process: &'a str,
    /// The row is live for this long from the statement's `now()`.
    pub(super) ttl_us: i64,
    /// What the process owns, to report.
    pub(super) reported: Reported,
    pub(super) hostname: &'a str,
    pub(super) version: &'a str,
    /// A new row is settled at once (no probation).
    pub(super) settled: bool,
}

/// What a heartbeat answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Beat {
    /// The row had lapsed since the previous beat, or was absent.
    pub(super) lapsed: bool,
    /// The row has settled: the process counts in the fair share.
    pub(super) settled: bool,
}

/// What a process row reports with a write: the units it owns (and is shedding), and their weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reported {
    pub(super) count: i32,
    pub(super) weight: i64,
}

/// Which units a batch names, as the statements take them: tenants and shards, in the same order.
pub(super) struct Batch<'a> {
    pub(super) tenants: Vec<&'a str>,
    pub(super) shards: Vec<i32>,
}

impl<'a> Batch<'a> {
    pub(super) fn of(units: impl IntoIterator<Item = &'a Unit>) -> Batch<'a> {
        let (tenants, shards) = units
            .into_iter()
            .map(|unit| (unit.tenant.as_str(), unit.shard))
            .unzip();
        Batch { tenants, shards }
    }
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
        let dml = |sql: &str| Statement::new(render_tables(sql, &both));
        let on = |sql: &str, table: &TableName| render_tables(sql, &[("table", table)]);
        Arc::new(Statements {
            create_processes: [on(CREATE_PROCESSES, &processes)],
            create_units: [
                on(CREATE_UNITS, &units),
                on(CREATE_SEQUENCE, &units),
                on(CREATE_OWNER_INDEX, &units),
                on(CREATE_CLAIMABLE_INDEX, &units),
            ],
            heartbeat: dml(HEARTBEAT),
            owned: dml(OWNED),
            stats: dml(STATS),
            claim: dml(CLAIM),
            shed: dml(SHED),
            release: dml(RELEASE),
            delete_process: dml(DELETE_PROCESS),
            sweep: dml(SWEEP),
            add_units: dml(ADD_UNITS),
            remove_units: dml(REMOVE_UNITS),
            set_weight: dml(SET_WEIGHT),
            bump_changes: dml(BUMP_CHANGES),
            fence: render_tables(FENCE, &both),
            assignments: dml(ASSIGNMENTS),
            processes_view: dml(PROCESSES),
            unowned: dml(UNOWNED),
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

impl Statements {
    /// Upserts `process`'s row, live for `ttl_us`, reporting `reported` and who runs it, settled
    /// at once with `settled` (else from its second beat): whether the row had lapsed (or was
    /// absent), and whether it is settled now.
    pub(super) fn heartbeat(&self, db: &Db, beat: &Heartbeat<'_>) -> Result<Beat> {
        let params = (
            beat.process,
            beat.ttl_us,
            beat.reported.count,
            beat.reported.weight,
            beat.hostname,
            beat.version,
            beat.settled,
        );
        let row = db.query_one("heartbeat", Policy::ONCE, &self.heartbeat, &params)?;
        Ok(Beat {
            lapsed: row.get("lapsed"),
            settled: row.get("settled"),
        })
    }

    /// What a tick decides from, without scanning units.
    pub(super) fn stats(&self, db: &Db, process: &str) -> Result<Stats> {
        let context = "read membership stats";
        let row = db.query_one(context, Policy::IDEMPOTENT, &self.stats, &(process,))?;
        let ids: Vec<String> = row.get("others");
        let weights: Vec<i64> = row.get("others_weights");
        let others_settled: Vec<bool> = row.get("others_settled");
        let unowned: i64 = row.get("unowned_weight");
        let orphaned: i64 = row.get("orphaned_weight");
        Ok(Stats {
            live: row.get("live"),
            live_self: row.get("live_self"),
            others: ids.into_iter().zip(weights).collect(),
            others_settled,
            settled_self: row.get("settled_self"),
            claimable: unowned + orphaned,
            changes: row.get("changes"),
            digest: Digest {
                units: row.get("owned_units"),
                marks: row.get("owned_marks"),
            },
        })
    }

    /// The unit rows that name `process`.
    pub(super) fn owned(&self, db: &Db, process: &str) -> Result<Vec<(Unit, Hold)>> {
        let rows = db.query(
            "read owned units",
            Policy::IDEMPOTENT,
            &self.owned,
            &(process,),
        )?;
        Ok(rows.iter().map(unit_hold).collect())
    }

    /// Claims at most `limit` claimable units, up to `budget` weight, starting from `slot` of the
    /// key space; the row then reports `reported` plus what was claimed.
    pub(super) fn claim(
        &self,
        db: &Db,
        process: &str,
        limit: i32,
        budget: i64,
        slot: i32,
        reported: Reported,
    ) -> Result<Vec<(Unit, Hold)>> {
        let params = (
            process,
            limit,
            budget,
            slot,
            reported.count,
            reported.weight,
            db.timeline_tokens(),
        );
        let rows = db.query("claim units", Policy::ONCE, &self.claim, &params)?;
        Ok(rows.iter().map(unit_hold).collect())
    }

    /// Gives back `units` (owner-guarded, only while live), the row then reporting `reported`:
    /// the units given back.
    pub(super) fn shed(
        &self,
        db: &Db,
        process: &str,
        units: &Batch<'_>,
        reported: Reported,
    ) -> Result<Vec<Unit>> {
        let params = (
            process,
            &units.tenants,
            &units.shards,
            reported.count,
            reported.weight,
        );
        let rows = db.query("shed units", Policy::IDEMPOTENT, &self.shed, &params)?;
        Ok(rows.iter().map(unit).collect())
    }

    /// Gives back every unit of `process` but `keep`, the row then reporting `reported`: the units
    /// released.
    pub(super) fn release(
        &self,
        db: &Db,
        process: &str,
        keep: &Batch<'_>,
        reported: Reported,
    ) -> Result<Vec<Unit>> {
        let params = (
            process,
            &keep.tenants,
            &keep.shards,
            reported.count,
            reported.weight,
        );
        let rows = db.query("release units", Policy::ONCE, &self.release, &params)?;
        Ok(rows.iter().map(unit).collect())
    }

    /// Deletes `process`'s row, freeing its units.
    pub(super) fn delete_process(&self, db: &Db, process: &str) -> Result<()> {
        let context = "delete process";
        db.query_one(context, Policy::ONCE, &self.delete_process, &(process,))?;
        Ok(())
    }

    /// Deletes process rows expired for longer than `cutoff_us` and frees their units.
    pub(super) fn sweep(&self, db: &Db, cutoff_us: i64) -> Result<Sweep> {
        let row = db.query_one("sweep processes", Policy::ONCE, &self.sweep, &(cutoff_us,))?;
        Ok(Sweep {
            processes: u64::try_from(row.get::<_, i64>("processes")).unwrap_or_default(),
            units: u64::try_from(row.get::<_, i64>("units")).unwrap_or_default(),
        })
    }

    /// Registers `units` (`remove`: unregisters them): how many changed, and the live owners
    /// whose units changed.
    pub(super) fn add_or_remove(
        &self,
        db: &Db,
        context: &str,
        remove: bool,
        units: &Batch<'_>,
    ) -> Result<(u64, Vec<String>)> {
        let statement = if remove {
            &self.remove_units
        } else {
            &self.add_units
        };
        let params = (&units.tenants, &units.shards);
        let row = db.query_one(context, Policy::ONCE, statement, &params)?;
        let changed = u64::try_from(row.get::<_, i64>(0)).unwrap_or_default();
        Ok((changed, row.get(1)))
    }

    /// Sets `unit`'s weight: `None` when it is not registered, else its owner, if any.
    pub(super) fn set_weight(
        &self,
        db: &Db,
        unit: &Unit,
        weight: i32,
    ) -> Result<Option<Option<String>>> {
        let params = (unit.tenant.as_str(), unit.shard, weight);
        let rows = db.query("set unit weight", Policy::ONCE, &self.set_weight, &params)?;
        Ok(rows.first().map(|row| row.get("owner")))
    }

    /// Moves the change counters of `owners`.
    pub(super) fn bump_changes(&self, db: &Db, context: &str, owners: &[String]) -> Result<()> {
        db.query(context, Policy::IDEMPOTENT, &self.bump_changes, &(owners,))?;
        Ok(())
    }

    /// Whether, inside `tx`, `process` still owns `unit` under `token` while live (the row then
    /// locked `FOR SHARE` until `tx` ends).
    pub(super) fn fence(
        &self,
        tx: &mut postgres::Transaction<'_>,
        process: &str,
        unit: &Unit,
        token: i64,
    ) -> Result<bool> {
        let params = (process, unit.tenant.as_str(), unit.shard, token);
        let rows = in_transaction(tx, &self.fence, &params)
            .map_err(|e| Error::from_postgres("fence unit", e))?;
        Ok(!rows.is_empty())
    }

    /// Every registered unit, in unit order.
    pub(super) fn assignments(&self, db: &Db) -> Result<Vec<Assignment>> {
        let rows = db.query(
            "read assignments",
            Policy::IDEMPOTENT,
            &self.assignments,
            &(),
        )?;
        Ok(rows
            .iter()
            .map(|row| Assignment {
                unit: unit(row),
                weight: row.get("weight"),
                owner: row.get("owner"),
                owner_live: row.get("owner_live"),
                token: row.get("token"),
                claimed_at: row.get("claimed_at"),
            })
            .collect())
    }

    /// Every process row, oldest first.
    pub(super) fn processes(&self, db: &Db) -> Result<Vec<ProcessInfo>> {
        let context = "read processes";
        let rows = db.query(context, Policy::IDEMPOTENT, &self.processes_view, &())?;
        Ok(rows
            .iter()
            .map(|row| ProcessInfo {
                id: row.get("process_id"),
                hostname: row.get("hostname"),
                version: row.get("version"),
                started_at: row.get("started_at"),
                expires_at: row.get("expires_at"),
                live: row.get("live"),
                units: row.get("unit_count"),
                weight: row.get("weight"),
            })
            .collect())
    }

    /// The enabled units no live process owns, and their weight.
    pub(super) fn unowned(&self, db: &Db) -> Result<Unowned> {
        let row = db.query_one(
            "count unowned units",
            Policy::IDEMPOTENT,
            &self.unowned,
            &(),
        )?;
        Ok(Unowned {
            units: row.get("units"),
            weight: row.get("weight"),
        })
    }
}

/// A row's unit.
fn unit(row: &Row) -> Unit {
    Unit {
        tenant: row.get("tenant"),
        shard: row.get("shard"),
    }
}

/// A row's unit and how this process holds it.
fn unit_hold(row: &Row) -> (Unit, Hold) {
    (
        unit(row),
        Hold {
            weight: row.get("weight"),
            token: row.get::<_, Option<i64>>("token").unwrap_or_default(),
            removed: row.get("removed"),
            mark: row.get("mark"),
        },
    )
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
