//! Leader election against a real PostgreSQL, one file per concern: an elector polled by hand
//! (`polling`), and leadership as a loop, `Elector::campaign` (`campaign`).

#[path = "../common/mod.rs"]
mod common;

mod campaign;
mod polling;

use crate::common::Tables;

fn table(tables: &mut Tables) -> String {
    common::leader_table(tables)
}
