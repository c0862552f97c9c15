//! `pgtenure members`: every membership process, live or expired, with the units it owns.

use clap::Args;
use pgtenure::Db;

use crate::output::{members_json, members_table, show, view};
use crate::{Failure, Global};

#[derive(Args, Debug)]
pub(crate) struct MembersArgs;

impl MembersArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let members = global.units(db)?.processes()?;
        let view = view(db, global)?;
        show(global, &members_json(&members), || {
            members_table(&members, &view)
        })
    }
}
