//! The tables whose schema versions a [`Db`](super::Db) found good enough for its handles' statements, kept
//! per `Db` so that each is read once (the check and the migrations that fill it are in the
//! `migrations` module).

use std::collections::HashSet;

use parking_lot::Mutex;

use crate::table_name::TableName;

/// The tables whose versions a [`Db`](super::Db) found good enough, by kind (the name its version record
/// gives it: `leases`, `leader`, …) and quoted name.
#[derive(Debug, Default)]
pub(crate) struct SchemaChecks(Mutex<HashSet<(&'static str, String)>>);

impl SchemaChecks {
    /// Records that the `kind` table `table` is at a version its statements can use.
    pub(crate) fn passed(&self, kind: &'static str, table: &TableName) {
        self.0.lock().insert((kind, table.quoted()));
    }

    /// Whether the `kind` table `table` was found at a version its statements can use.
    pub(crate) fn has_passed(&self, kind: &'static str, table: &TableName) -> bool {
        self.0.lock().contains(&(kind, table.quoted()))
    }
}
