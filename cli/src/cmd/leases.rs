//! `pgtenure leases`: every lease row, live or lapsed.

use clap::Args;
use pgtenure::Db;

use crate::output::{leases_json, leases_table, show, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct LeasesArgs {
    /// Only keys that start with this text (% and _ are plain characters).
    #[arg(long, default_value = "")]
    prefix: String,
}

impl LeasesArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let rows = global.leases(db)?.list(&self.prefix)?;
        let view = view(db, global)?;
        show(global, &leases_json(&rows), || leases_table(&rows, &view))
    }
}
