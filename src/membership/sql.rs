//! The membership statements, rendered once for a pair of tables, one function per operation, and
//! the tables' creation.

use std::sync::Arc;
use std::time::Instant;

use super::unit::Unit;
use super::views::{Assignment, ProcessInfo, Unowned};
use crate::db::{Db, Policy};
use crate::error::{Error, Result};
use crate::fence::{statement_text, Fence};
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render_tables, TableName};

/// The processes table unless [`Leaser::with_tables`](super::Leaser::with_tables) names another.
pub const DEFAULT_PROCESSES_TABLE: &str = "pgtenure_processes";
/// The units table unless [`Leaser::with_tables`](super::Leaser::with_tables) names another.
pub const DEFAULT_UNITS_TABLE: &str = "pgtenure_units";

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

crate::params! {
    /// A heartbeat's parameters, as `sql/membership/heartbeat.sql` binds them.
    struct Beating<'a> {
        process: &'a str,
        ttl_us: i64,
        count: i32,
        weight: i64,
        hostname: &'a str,
        version: &'a str,
        settled: bool,
        known: bool,
        settle_after_us: i64,
    }
}

crate::params! {
    /// A batch's parameters as `shed` and `release` bind them (`sql/membership/shed.sql`,
    /// `release.sql`): the units given back, or kept.
    struct Giving<'a> {
        process: &'a str,
        tenants: &'a Vec<&'a str>,
        shards: &'a Vec<i32>,
        count: i32,
        weight: i64,
    }
}

crate::params! {
    /// A claim's parameters (`sql/membership/claim.sql`).
    struct Claiming<'a> {
        process: &'a str,
        limit: i32,
        budget: i64,
        slot: i32,
        count: i32,
        weight: i64,
        /// Whether the tokens fold in the server's timeline ([`Db::timeline_tokens`]).
        timeline_tokens: bool,
    }
}

/// A batch of units as `add_units` and `remove_units` bind it: tenants, shards.
type UnitBatch = (&'static Vec<&'static str>, &'static Vec<i32>);

pub(super) struct Statements {
    pub(super) processes: TableName,
    pub(super) units: TableName,
    /// The check of both tables' schema versions before the first statement.
    gate: Gate,
    heartbeat: Statement<Beating<'static>>,
    owned: Statement<(&'static str,)>,
    stats: Statement<(&'static str,)>,
    claim: Statement<Claiming<'static>>,
    shed: Statement<Giving<'static>>,
    release: Statement<Giving<'static>>,
    delete_process: Statement<(&'static str,)>,
    sweep: Statement<(i64,)>,
    add_units: Statement<UnitBatch>,
    remove_units: Statement<UnitBatch>,
    set_weight: Statement<(&'static str, i32, i32)>,
    bump_changes: Statement<(&'static [String],)>,
    /// Run on the caller's transaction, unprepared (see [`Leaser::fence`](super::Leaser::fence)).
    fence: Arc<str>,
    assignments: Statement<()>,
    processes_view: Statement<()>,
    unowned: Statement<()>,
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
    /// How many unit rows name this process, and the sum of their marks: the digest the tick
    /// compares with its local view's.
    pub(super) owned_units: i64,
    pub(super) owned_marks: i64,
}

/// A unit row that names a process (`sql/membership/owned.sql`, `claim.sql`): the unit, its
/// weight, the fencing token of its claim, whether it was unregistered, and its mark (a hash of
/// tenant, shard, token and weight, computed by the database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnitRow {
    pub(super) unit: Unit,
    pub(super) weight: i32,
    pub(super) token: i64,
    pub(super) removed: bool,
    pub(super) mark: i32,
}

/// What the sweep statement answered: process rows deleted and units freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Swept {
    pub(super) processes: u64,
    pub(super) units: u64,
}

/// A heartbeat's parameters (`sql/membership/heartbeat.sql`).
pub(super) struct Heartbeat<'a> {
    pub(super) process: &'a str,
    /// The row is live for this long from the statement's `now()`.
    pub(super) ttl_us: i64,
    /// What the process owns, to report.
    pub(super) reported: Reported,
    /// Whether `reported` is known to match the database (the process has read its units since it
    /// started or lapsed); if not, the row keeps the count and weight it has.
    pub(super) known: bool,
    pub(super) hostname: &'a str,
    pub(super) version: &'a str,
    /// A new row is settled at once (no probation).
    pub(super) settled: bool,
    /// A later beat settles the row once it has been live this long (microseconds).
    pub(super) settle_after_us: i64,
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
        let dml = |sql: &str| render_tables(sql, &both);
        Arc::new(Statements {
            gate: Gate::new(vec![
                (Kind::Processes, processes.clone()),
                (Kind::Units, units.clone()),
            ]),
            heartbeat: Statement::new(dml(HEARTBEAT)),
            owned: Statement::new(dml(OWNED)),
            stats: Statement::new(dml(STATS)),
            claim: Statement::new(dml(CLAIM)),
            shed: Statement::new(dml(SHED)),
            release: Statement::new(dml(RELEASE)),
            delete_process: Statement::new(dml(DELETE_PROCESS)),
            sweep: Statement::new(dml(SWEEP)),
            add_units: Statement::new(dml(ADD_UNITS)),
            remove_units: Statement::new(dml(REMOVE_UNITS)),
            set_weight: Statement::new(dml(SET_WEIGHT)),
            bump_changes: Statement::new(dml(BUMP_CHANGES)),
            fence: statement_text(&render_tables(FENCE, &both)),
            assignments: Statement::new(dml(ASSIGNMENTS)),
            processes_view: Statement::new(dml(PROCESSES)),
            unowned: Statement::new(dml(UNOWNED)),
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
        db.migrate_table(Kind::Processes, &self.processes)?;
        db.migrate_table(Kind::Units, &self.units).map(drop)
    }
}

impl Statements {
    /// Upserts `process`'s row, live for `ttl_us`, reporting `reported` and who runs it, settled
    /// at once with `settled` (else from its second beat): whether the row had lapsed (or was
    /// absent), and whether it is settled now.
    pub(super) fn heartbeat(&self, db: &Db, beat: &Heartbeat<'_>) -> Result<Beat> {
        self.gate.check(db)?;
        let params = Beating {
            process: beat.process,
            ttl_us: beat.ttl_us,
            count: beat.reported.count,
            weight: beat.reported.weight,
            hostname: beat.hostname,
            version: beat.version,
            settled: beat.settled,
            known: beat.known,
            settle_after_us: beat.settle_after_us,
        };
        let row = db.query_one("heartbeat", Policy::ONCE, &self.heartbeat, &params)?;
        let read = Read::new(&row, "heartbeat", &self.processes);
        Ok(Beat {
            lapsed: read.column("lapsed")?,
            settled: read.column("settled")?,
        })
    }

    /// What a tick decides from, without scanning units.
    pub(super) fn stats(&self, db: &Db, process: &str) -> Result<Stats> {
        self.gate.check(db)?;
        let context = "read membership stats";
        let row = db.query_one(context, Policy::IDEMPOTENT, &self.stats, &(process,))?;
        // Each column is named with the table it is computed from.
        let (processes, units) = (
            Read::new(&row, context, &self.processes),
            Read::new(&row, context, &self.units),
        );
        let ids: Vec<String> = processes.column("others")?;
        let weights: Vec<i64> = processes.column("others_weights")?;
        let others_settled: Vec<bool> = processes.column("others_settled")?;
        let unowned: i64 = units.column("unowned_weight")?;
        let orphaned: i64 = processes.column("orphaned_weight")?;
        Ok(Stats {
            live: processes.column("live")?,
            live_self: processes.column("live_self")?,
            others: ids.into_iter().zip(weights).collect(),
            others_settled,
            settled_self: processes.column("settled_self")?,
            claimable: unowned + orphaned,
            changes: processes.column("changes")?,
            owned_units: units.column("owned_units")?,
            owned_marks: units.column("owned_marks")?,
        })
    }

    /// The unit rows that name `process`.
    pub(super) fn owned(&self, db: &Db, process: &str) -> Result<Vec<UnitRow>> {
        self.gate.check(db)?;
        let rows = db.query(
            "read owned units",
            Policy::IDEMPOTENT,
            &self.owned,
            &(process,),
        )?;
        let read = |row| unit_row(Read::new(row, "read owned units", &self.units));
        rows.iter().map(read).collect()
    }

    /// Claims at most `limit` claimable units, up to `budget` weight, starting from `slot` of the
    /// key space; the row then reports `reported` plus what was claimed. An answer whose rows
    /// cannot be read is an error although the units may have been claimed (the table then names
    /// this process as their owner). It waits for a pool connection until `until` at most (the run
    /// loop's: a claim must not wait out an outage and then take what lapsed during it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn claim(
        &self,
        db: &Db,
        process: &str,
        limit: i32,
        budget: i64,
        slot: i32,
        reported: Reported,
        until: Option<Instant>,
    ) -> Result<Vec<UnitRow>> {
        self.gate.check(db)?;
        let params = Claiming {
            process,
            limit,
            budget,
            slot,
            count: reported.count,
            weight: reported.weight,
            timeline_tokens: db.timeline_tokens(),
        };
        let policy = until.map_or(Policy::ONCE, |until| Policy::ONCE.until(until));
        let rows = db.query("claim units", policy, &self.claim, &params)?;
        let read = |row| unit_row(Read::new(row, "claim units", &self.units));
        rows.iter().map(read).collect()
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
        self.gate.check(db)?;
        let params = Giving {
            process,
            tenants: &units.tenants,
            shards: &units.shards,
            count: reported.count,
            weight: reported.weight,
        };
        let rows = db.query("shed units", Policy::IDEMPOTENT, &self.shed, &params)?;
        let read = |row| unit(&Read::new(row, "shed units", &self.units));
        rows.iter().map(read).collect()
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
        self.gate.check(db)?;
        let params = Giving {
            process,
            tenants: &keep.tenants,
            shards: &keep.shards,
            count: reported.count,
            weight: reported.weight,
        };
        let rows = db.query("release units", Policy::ONCE, &self.release, &params)?;
        let read = |row| unit(&Read::new(row, "release units", &self.units));
        rows.iter().map(read).collect()
    }

    /// Deletes `process`'s row, freeing its units.
    pub(super) fn delete_process(&self, db: &Db, process: &str) -> Result<()> {
        self.gate.check(db)?;
        let context = "delete process";
        db.query_one(context, Policy::ONCE, &self.delete_process, &(process,))?;
        Ok(())
    }

    /// Deletes process rows expired for longer than `cutoff_us` and frees their units, waiting for
    /// a pool connection until `until` at most (as a claim).
    pub(super) fn sweep(&self, db: &Db, cutoff_us: i64, until: Option<Instant>) -> Result<Swept> {
        self.gate.check(db)?;
        let context = "sweep processes";
        let policy = until.map_or(Policy::ONCE, |until| Policy::ONCE.until(until));
        let row = db.query_one(context, policy, &self.sweep, &(cutoff_us,))?;
        // Counts, never negative.
        let count = |table, name| {
            Read::new(&row, context, table)
                .column::<i64>(name)
                .map(|n| u64::try_from(n).unwrap_or_default())
        };
        Ok(Swept {
            processes: count(&self.processes, "processes")?,
            units: count(&self.units, "units")?,
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
        self.gate.check(db)?;
        let statement = if remove {
            &self.remove_units
        } else {
            &self.add_units
        };
        let params = (&units.tenants, &units.shards);
        let row = db.query_one(context, Policy::ONCE, statement, &params)?;
        let read = Read::new(&row, context, &self.units);
        // A count, never negative.
        let changed = u64::try_from(read.at::<i64>(0)?).unwrap_or_default();
        Ok((changed, read.at(1)?))
    }

    /// Sets `unit`'s weight: `None` when it is not registered, else its owner, if any.
    pub(super) fn set_weight(
        &self,
        db: &Db,
        unit: &Unit,
        weight: i32,
    ) -> Result<Option<Option<String>>> {
        self.gate.check(db)?;
        let params = (unit.tenant.as_str(), unit.shard, weight);
        let rows = db.query("set unit weight", Policy::ONCE, &self.set_weight, &params)?;
        rows.first()
            .map(|row| Read::new(row, "set unit weight", &self.units).column("owner"))
            .transpose()
    }

    /// Moves the change counters of `owners`.
    pub(super) fn bump_changes(&self, db: &Db, context: &str, owners: &[String]) -> Result<()> {
        self.gate.check(db)?;
        db.query(context, Policy::IDEMPOTENT, &self.bump_changes, &(owners,))?;
        Ok(())
    }

    /// The fence of `process`'s claim `token` of `unit`: run inside a transaction, whether the
    /// process still owns it under that token while live (the row then locked `FOR SHARE` until
    /// the transaction ends).
    pub(super) fn fence(&self, process: &str, unit: &Unit, token: i64) -> Fence {
        Fence::new(
            "fence unit",
            self.fence.clone(),
            vec![
                process.into(),
                unit.tenant.as_str().into(),
                unit.shard.into(),
                token.into(),
            ],
        )
    }

    /// Every registered unit, in unit order.
    pub(super) fn assignments(&self, db: &Db) -> Result<Vec<Assignment>> {
        self.gate.check(db)?;
        let rows = db.query(
            "read assignments",
            Policy::IDEMPOTENT,
            &self.assignments,
            &(),
        )?;
        rows.iter()
            .map(|row| {
                let read = Read::new(row, "read assignments", &self.units);
                Ok(Assignment {
                    unit: unit(&read)?,
                    weight: read.column("weight")?,
                    owner: read.column("owner")?,
                    owner_live: Read::new(row, "read assignments", &self.processes)
                        .column("owner_live")?,
                    token: read.column("token")?,
                    claimed_at: read.column("claimed_at")?,
                })
            })
            .collect()
    }

    /// Every process row, oldest first.
    pub(super) fn processes(&self, db: &Db) -> Result<Vec<ProcessInfo>> {
        self.gate.check(db)?;
        let context = "read processes";
        let rows = db.query(context, Policy::IDEMPOTENT, &self.processes_view, &())?;
        rows.iter()
            .map(|row| {
                let read = Read::new(row, context, &self.processes);
                Ok(ProcessInfo {
                    id: read.column("process_id")?,
                    hostname: read.column("hostname")?,
                    version: read.column("version")?,
                    started_at: read.column("started_at")?,
                    expires_at: read.column("expires_at")?,
                    live: read.column("live")?,
                    settled: read.column("settled")?,
                    units: read.column("unit_count")?,
                    weight: read.column("weight")?,
                })
            })
            .collect()
    }

    /// The enabled units no live process owns, and their weight.
    pub(super) fn unowned(&self, db: &Db) -> Result<Unowned> {
        self.gate.check(db)?;
        let context = "count unowned units";
        let row = db.query_one(context, Policy::IDEMPOTENT, &self.unowned, &())?;
        let read = Read::new(&row, context, &self.units);
        Ok(Unowned {
            units: read.column("units")?,
            weight: read.column("weight")?,
        })
    }
}

/// A row's unit.
fn unit(read: &Read<'_>) -> Result<Unit> {
    Ok(Unit {
        tenant: read.column("tenant")?,
        shard: read.column("shard")?,
    })
}

/// A unit row that names a process.
fn unit_row(read: Read<'_>) -> Result<UnitRow> {
    Ok(UnitRow {
        unit: unit(&read)?,
        weight: read.column("weight")?,
        // NULL until the unit's first claim (a table made before tokens).
        token: read.column::<Option<i64>>("token")?.unwrap_or_default(),
        removed: read.column("removed")?,
        mark: read.column("mark")?,
    })
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
        assert!(!sql.claim.text().contains('{'));
    }
}
