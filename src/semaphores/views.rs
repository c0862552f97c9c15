//! What operators look at: the live permits of a key ([`Semaphore::holders`]).

use std::time::SystemTime;

use super::sql::HolderRow;
#[cfg(doc)]
use super::{Permit, Semaphore};

/// A live permit of a key, by the database clock ([`Semaphore::holders`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// The key.
    pub key: String,
    /// The permit's slot: a key's permits are slots 0 to N - 1 ([`Permit::slot`]).
    pub slot: u32,
    /// The owner holding it ([`Semaphore::with_owner`]).
    pub owner: String,
    /// The permit's fencing token ([`Permit::token`]).
    pub token: i64,
    /// When its tenure began (database time).
    pub acquired_at: SystemTime,
    /// When it lapses unless renewed (database time).
    pub held_until: SystemTime,
}

impl PermitInfo {
    pub(super) fn from_row(row: HolderRow) -> PermitInfo {
        PermitInfo {
            key: row.key,
            // The table's check keeps slots non-negative.
            slot: u32::try_from(row.slot).unwrap_or(0),
            owner: row.owner,
            token: row.token,
            acquired_at: row.acquired_at,
            held_until: row.held_until,
        }
    }
}
