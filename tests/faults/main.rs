//! Fault injection, one file per concern: round trips of every operation (`round_trips`), lease
//! holders blackholed, paused and through a database restart (`leases`), a SERIALIZABLE default
//! (`isolation`), partitions and crashes during rebalancing (`membership`), and every bad input
//! (`bad_input`). Each asserts that nothing was held twice and no stale holder wrote.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod child;
mod elector;
mod isolation;
mod leases;
mod limits;
mod membership;
mod outages;
mod round_trips;

use pgtenure::{leases::Leases, Db};

const CHILD_ENV: &str = "PGTENURE_FAULT_CHILD";

/// What a fenced write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    Done,
    /// The fence refused: a newer tenure exists, or this one lapsed.
    Refused,
    /// The database could not be reached (a fault): nothing known written.
    Failed,
}

/// One protected write: fence, then insert into the ledger, in one transaction of `db`'s.
fn fenced_write(db: &Db, leases: &Leases, ledger: &str, key: &str, token: i64) -> Write {
    let Ok(mut conn) = db.connection() else {
        return Write::Failed;
    };
    let Ok(mut tx) = conn.transaction() else {
        return Write::Failed;
    };
    match leases.fence(&mut tx, key, token) {
        Ok(true) => {}
        Ok(false) => return Write::Refused,
        Err(_) => return Write::Failed,
    }
    let insert = format!("INSERT INTO {ledger} (token, owner) VALUES ($1, $2)");
    if tx.execute(&insert, &[&token, &leases.owner()]).is_err() || tx.commit().is_err() {
        return Write::Failed;
    }
    Write::Done
}
