//! `pgtenure migrate`: create pgtenure's tables or bring them to this version's schema, or with
//! `--dry-run` print the SQL that would run (for DBAs who apply DDL themselves), per table from
//! its current version. See `docs/upgrading.md`.

use clap::Args;
use pgtenure::migrations::{self, Plan, Tables};
use pgtenure::{Db, Error};
use serde_json::{json, Value};

use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct MigrateArgs {
    /// Print the SQL that would run, per table from its current version, and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// The fire claims table.
    #[arg(long, default_value = pgtenure::fire_claims::DEFAULT_TABLE)]
    fire_claims_table: String,
}

impl MigrateArgs {
    /// The tables the flags name.
    pub(crate) fn tables(&self, global: &Global) -> Result<Tables, Error> {
        Tables::default()
            .with_tick_claims(&global.ticks_table)?
            .with_fire_claims(&self.fire_claims_table)?
            .with_leases(&global.leases_table)?
            .with_leader(&global.leader_table)?
            .with_membership(&global.processes_table, &global.units_table)?
            .with_semaphores(&global.semaphores_table)
    }

    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let tables = self.tables(global)?;
        let plans = if self.dry_run {
            migrations::plan(db, &tables)?
        } else {
            migrations::migrate(db, &tables)?
        };
        let mut out = String::new();
        if global.as_json() {
            let list: Vec<Value> = plans.iter().map(|p| plan_json(p, !self.dry_run)).collect();
            out = format!("{:#}\n", Value::Array(list));
        } else if self.dry_run {
            if plans.iter().any(|p| !p.is_current()) {
                out.push_str(DRY_RUN_HEADER);
            }
            for plan in &plans {
                out.push_str(&plan.to_string());
                out.push('\n');
            }
        } else {
            for plan in &plans {
                out.push_str(&summary(plan));
                out.push('\n');
            }
        }
        out!("{out}");
        Ok(0)
    }
}

/// How to apply the dry run's SQL, as `migrate` itself does (docs/upgrading.md).
const DRY_RUN_HEADER: &str = "\
-- Apply each table's statements in one transaction, as the role that owns the tables. While
-- instances run, bound the wait for each table's lock first, so that their statements do not
-- queue behind an ALTER TABLE waiting for a long transaction, and run it again if it times out
-- (every statement is idempotent):
--   BEGIN; SET LOCAL lock_timeout = '100ms'; <the table's statements> COMMIT;

";

/// One line saying what `migrate` did to a table.
fn summary(plan: &Plan) -> String {
    let what = format!("{} table {}", plan.kind(), plan.table());
    let target = plan.target();
    match (plan.exists(), plan.recorded_version(), plan.is_current()) {
        (false, _, _) => format!("{what}: created at schema version {target}"),
        (true, _, true) => format!("{what}: at schema version {target}, nothing to do"),
        (true, Some(v), false) if plan.version() < Some(v) => format!(
            "{what}: recorded at schema version {v} but had only what version {} added (dropped \
             by hand?); every step ran again, now at {target}",
            plan.version().unwrap_or(1)
        ),
        (true, Some(v), false) => format!("{what}: migrated from schema version {v} to {target}"),
        (true, None, false) => format!(
            "{what}: had no version record (columns of version {}); migrated to {target}",
            plan.version().unwrap_or(1)
        ),
    }
}

fn plan_json(plan: &Plan, applied: bool) -> Value {
    json!({
        "table": plan.table(),
        "kind": plan.kind(),
        "exists": plan.exists(),
        "recorded_version": plan.recorded_version(),
        "version": plan.version(),
        "target": plan.target(),
        "statements": plan.statements(),
        "applied": applied && !plan.is_current(),
    })
}
