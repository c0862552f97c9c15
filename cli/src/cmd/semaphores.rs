//! `pgtenure semaphores`: every live semaphore permit, by key and slot.

use clap::Args;
use pgtenure::Db;

use crate::output::{permits_json, permits_table, show, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct SemaphoresArgs {
    /// Only keys that start with this text (% and _ are plain characters).
    #[arg(long, default_value = "")]
    prefix: String,
}

impl SemaphoresArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let rows = global.semaphores(db)?.list(&self.prefix)?;
        let view = view(db, global)?;
        show(global, &permits_json(&rows), || permits_table(&rows, &view))
    }
}
