//! What a process holds of its units: each unit's weight, token and mark, and the digest of them
//! that the stats statement compares with the database's rows.

use std::collections::BTreeMap;

use super::sql::UnitRow;
use super::unit::Unit;

/// What this process holds of one unit: its weight, the fencing token of its claim, whether it
/// was unregistered ([`Units::remove`](super::Units::remove)) while this process owned it, and the
/// row's mark (its part of the digest the stats statement reads, see [`Local::digest`](super::local::Local::digest)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hold {
    pub(super) weight: i32,
    pub(super) token: i64,
    pub(super) removed: bool,
    pub(super) mark: i32,
}

impl Hold {
    /// A unit row that names this process, as what it holds.
    pub(super) fn of(row: UnitRow) -> (Unit, Hold) {
        let UnitRow {
            unit,
            weight,
            token,
            removed,
            mark,
        } = row;
        let hold = Hold {
            weight,
            token,
            removed,
            mark,
        };
        (unit, hold)
    }
}

/// A digest of the unit rows that name a process: how many, and the sum of their marks (a hash of
/// tenant, shard, token and weight, computed by the database). The stats statement reads it from
/// the table at every tick; a tick whose local view has another digest re-reads its units, so a
/// change made behind the leaser's back (an operator's `UPDATE` moving a unit, a token rewritten)
/// is adopted at the next tick, without a statement more in steady state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Digest {
    pub(super) units: i64,
    pub(super) marks: i64,
}

/// Units and what this process holds of each.
pub(super) type Holds = BTreeMap<Unit, Hold>;

/// The total weight of `units`, disabled ones (weight 0) counting nothing.
pub(super) fn weight_of(units: &Holds) -> i64 {
    units.values().map(|h| i64::from(h.weight.max(0))).sum()
}

/// The units of `old` missing from `new` (lost), and of `new` missing from `old` (gained). A unit
/// in both under another token is both: it was claimed anew, so its earlier tenure ended (another
/// process may have owned it in between).
pub(super) fn diff(old: &Holds, new: &Holds) -> (Vec<Unit>, Vec<Unit>) {
    let same = |unit: &Unit, hold: &Hold, other: &Holds| {
        other.get(unit).is_some_and(|h| h.token == hold.token)
    };
    let lost = old
        .iter()
        .filter(|(u, h)| !same(u, h, new))
        .map(|(u, _)| u.clone())
        .collect();
    let gained = new
        .iter()
        .filter(|(u, h)| !same(u, h, old))
        .map(|(u, _)| u.clone())
        .collect();
    (lost, gained)
}
