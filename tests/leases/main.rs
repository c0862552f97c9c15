//! Keyed leases against a real PostgreSQL, one file per concern: tenures and tokens (`tenures`),
//! managed leases and their loss (`managed`).

#[path = "../common/mod.rs"]
mod common;

mod managed;
mod tenures;

use crate::common::{client, db, Tables};
use pgtenure::leases::Leases;

fn leases(tables: &mut Tables) -> (Leases, String) {
    let table = tables.name("lease");
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    leases.create_table().unwrap();
    (leases, table)
}

fn other(table: &str) -> Leases {
    Leases::new(&db()).with_table(table).unwrap()
}

/// (owner, token, superseded, live by the database clock)
fn row(table: &str, key: &str) -> Option<(String, i64, bool, bool)> {
    client()
        .query_opt(
            &format!(
                "SELECT owner, token, superseded, held_until > now() FROM {table} WHERE key = $1"
            ),
            &[&key],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn fence_check(leases: &Leases, key: &str, token: i64) -> bool {
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    let ok = leases.fence(&mut tx, key, token).unwrap();
    tx.commit().unwrap();
    ok
}
