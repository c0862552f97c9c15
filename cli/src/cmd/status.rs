//! `pgtenure status`: everything at a glance, a section per primitive whose table exists.

use clap::Args;
use pgtenure::elector::LeaderInfo;
use pgtenure::leases::LeaseInfo;
use pgtenure::membership::ProcessInfo;
use pgtenure::postgres::error::SqlState;
use pgtenure::semaphores::PermitInfo;
use pgtenure::tick_claims::JobInfo;
use pgtenure::{Db, Error};
use serde_json::json;

use crate::output::{
    count, jobs_json, jobs_table, leaders_json, leaders_table, leases_json, leases_table,
    members_json, members_table, permits_json, permits_table, view, View, MISSING_TABLES,
};
use crate::{Failure, Global, EXIT_ERROR};

#[derive(Args, Debug)]
pub(crate) struct StatusArgs;

impl StatusArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let view = view(db, global)?;
        let leases = section(global.leases(db)?.list(""))?;
        let leaders = section(global.elector(db)?.leaders())?;
        let members = section(global.units(db)?.processes())?;
        let jobs = section(global.ticks(db)?.jobs())?;
        let permits = section(global.semaphores(db)?.list(""))?;
        let missing: Vec<&str> = [
            (leases.is_none(), global.leases_table.as_str()),
            (leaders.is_none(), global.leader_table.as_str()),
            (members.is_none(), global.processes_table.as_str()),
            (jobs.is_none(), global.ticks_table.as_str()),
            (permits.is_none(), global.semaphores_table.as_str()),
        ]
        .into_iter()
        .filter_map(|(absent, table)| absent.then_some(table))
        .collect();
        if missing.len() == 5 {
            // Nothing to show: the wrong database, or tables of other names.
            say!(
                "pgtenure: none of pgtenure's tables is in this database ({}); {MISSING_TABLES}",
                missing.join(", ")
            );
            return Ok(EXIT_ERROR);
        }
        if global.as_json() {
            outln!(
                "{}",
                json!({
                    "leases": leases.as_deref().map(leases_json),
                    "leaders": leaders.as_deref().map(leaders_json),
                    "members": members.as_deref().map(members_json),
                    "jobs": jobs.as_deref().map(jobs_json),
                    "semaphores": permits.as_deref().map(permits_json),
                })
            );
            return Ok(0);
        }
        let sections = Sections {
            leases,
            leaders,
            members,
            jobs,
            permits,
        };
        sections.print(global, &view);
        if !missing.is_empty() {
            outln!(
            "\nNot in this database (primitives this application does not use, or tables of other \
             names): {}",
            missing.join(", ")
        );
        }
        Ok(0)
    }
}

/// What `status` read: each primitive's rows (the semaphores' live permits), `None` where its table does not exist.
struct Sections {
    leases: Option<Vec<LeaseInfo>>,
    leaders: Option<Vec<LeaderInfo>>,
    members: Option<Vec<ProcessInfo>>,
    jobs: Option<Vec<JobInfo>>,
    permits: Option<Vec<PermitInfo>>,
}

impl Sections {
    /// Prints each section whose table exists: a heading with its summary, then its table.
    fn print(&self, global: &Global, view: &View) {
        let heading = |what: &str, table: &str, summary: Option<String>| {
            if let Some(summary) = summary {
                outln!("{what} ({table}): {summary}");
            }
        };
        heading(
            "Leases",
            &global.leases_table,
            self.leases.as_ref().map(|rows| {
                let live = rows.iter().filter(|r| r.live).count();
                format!(
                    "{live} held of {}",
                    count(rows.len() as u64, "lease", "leases")
                )
            }),
        );
        if let Some(rows) = &self.leases {
            out!("{}", leases_table(rows, view));
            outln!();
        }
        heading(
            "Leaders",
            &global.leader_table,
            self.leaders.as_ref().map(|rows| {
                let live = rows.iter().filter(|r| r.live).count();
                format!(
                    "{live} of {} led",
                    count(rows.len() as u64, "fleet", "fleets")
                )
            }),
        );
        if let Some(rows) = &self.leaders {
            out!("{}", leaders_table(rows, view));
            outln!();
        }
        heading(
            "Members",
            &global.processes_table,
            self.members.as_ref().map(|rows| {
                let live = rows.iter().filter(|r| r.live).count();
                let units: i64 = rows
                    .iter()
                    .filter(|r| r.live)
                    .map(|r| i64::from(r.units))
                    .sum();
                format!(
                    "{live} live of {}, {} owned by live ones",
                    count(rows.len() as u64, "process", "processes"),
                    count(units.unsigned_abs(), "unit", "units")
                )
            }),
        );
        if let Some(rows) = &self.members {
            out!("{}", members_table(rows, view));
            outln!();
        }
        heading(
            "Jobs",
            &global.ticks_table,
            self.jobs.as_ref().map(|rows| {
                let busy = rows.iter().filter(|r| r.busy).count();
                format!("{busy} busy of {}", count(rows.len() as u64, "job", "jobs"))
            }),
        );
        if let Some(rows) = &self.jobs {
            out!("{}", jobs_table(rows, view));
        }
        self.print_permits(global, view);
    }

    /// The semaphores' section: the live permits, by key and slot.
    fn print_permits(&self, global: &Global, view: &View) {
        let Some(rows) = &self.permits else {
            return;
        };
        let mut keys: Vec<&str> = rows.iter().map(|r| r.key.as_str()).collect();
        keys.dedup();
        // The sections before end in a blank line, but for the jobs'.
        if self.jobs.is_some() {
            outln!();
        }
        outln!(
            "Semaphores ({}): {} held, on {}",
            global.semaphores_table,
            count(rows.len() as u64, "permit", "permits"),
            count(keys.len() as u64, "key", "keys")
        );
        out!("{}", permits_table(rows, view));
    }
}

/// One section of `status`: its rows, or `None` when its table does not exist (that primitive is
/// not used in this database).
pub(super) fn section<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(rows) => Ok(Some(rows)),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(None),
        Err(e) => Err(e),
    }
}
