//! `pgtenure units`: every registered unit and its owner.

use clap::Args;
use pgtenure::Db;

use crate::output::{show, units_json, units_table, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct UnitsArgs {
    /// Only units whose row names this process (its id as `members` shows it, or a prefix).
    #[arg(long, value_parser = process_prefix)]
    process: Option<String>,
}

/// A process id or a prefix of one: not blank (which would match every owned unit).
fn process_prefix(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("a blank process id matches every unit; give an id or a prefix of one".into());
    }
    Ok(text.to_owned())
}

impl UnitsArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let mut assignments = global.units(db)?.assignments()?;
        if let Some(process) = &self.process {
            assignments.retain(|a| {
                a.owner
                    .as_deref()
                    .is_some_and(|o| o.starts_with(process.as_str()))
            });
        }
        let view = view(db, global)?;
        show(global, &units_json(&assignments), || {
            units_table(&assignments, &view)
        })
    }
}
