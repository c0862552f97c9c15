//! `pgtenure jobs`: every recurring job's last tick, who claimed it and whether it is busy.

use clap::Args;
use pgtenure::Db;

use crate::output::{jobs_json, jobs_table, show, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct JobsArgs;

impl JobsArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let jobs = global.ticks(db)?.jobs()?;
        let view = view(db, global)?;
        show(global, &jobs_json(&jobs), || jobs_table(&jobs, &view))
    }
}
