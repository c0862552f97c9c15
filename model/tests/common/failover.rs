//! What the differential tests of the grants (acquire.sql, is_leader.sql) share: the grant
//! parameters `$5`..`$9` they run with, and the test server's timeline.

use std::time::{Duration, SystemTime};

use pgtenure_model::failover::Tick;
use pgtenure_model::failover::{Grant, Record};
use postgres::Transaction;

/// The TTL of every case, in ticks (seconds).
const TTL: Tick = 2;

/// The grant parameters `$5`..`$9` a grant (acquire.sql, is_leader.sql) runs with: neither folded
/// nor held off; folded (the test server is on timeline 1: base 0); and, when `gated` (the states
/// where the gate could matter differently), held off with a record naming the server's timeline
/// or another one, first seen as of creation, a TTL ago or less, grants resuming now or later.
pub fn grants(gated: bool) -> Vec<Grant> {
    let record = |timeline, seen_at, grants_from| Record {
        timeline,
        seen_at,
        grants_from,
    };
    let mut grants = vec![
        Grant::plain(),
        Grant {
            fold: true,
            ..Grant::plain()
        },
    ];
    if !gated {
        return grants;
    }
    for record in [
        record(1, None, None),
        record(2, None, None),
        record(1, Some(-TTL), None),
        record(1, Some(1 - TTL), None),
        record(1, None, Some(0)),
        record(1, None, Some(1)),
        record(2, Some(-TTL), Some(0)),
    ] {
        grants.push(Grant {
            fold: true,
            hold_off: true,
            record,
            ..Grant::plain()
        });
    }
    grants
}

/// The instant `tick` seconds after the transaction's `now()`.
pub fn instant(tx: &mut Transaction<'_>, tick: Tick) -> SystemTime {
    let now: SystemTime = tx.query_one("SELECT now()", &[]).unwrap().get(0);
    let offset = Duration::from_secs(u64::from(tick.unsigned_abs()));
    if tick < 0 {
        now - offset
    } else {
        now + offset
    }
}

/// The test server's timeline, which the model's table is given: tokens fold in `(timeline - 1)`
/// times the model's `2^48`, so the comparison holds on timeline 1 only.
pub fn server_timeline(tx: &mut Transaction<'_>) -> u8 {
    let timeline: i64 = tx
        .query_one(
            "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        timeline, 1,
        "the differential test needs a server on timeline 1 (never promoted)"
    );
    1
}
