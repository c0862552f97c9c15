//! What operators look at: the live permits of a key ([`Semaphore::holders`]) or under a prefix
//! ([`Semaphore::list`]), and the table at a glance for monitoring ([`Semaphore::summary`]).

use std::time::SystemTime;

use super::sql::{HolderRow, SummaryRow};
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

/// The semaphores table at a glance ([`Semaphore::summary`]): counts, and the keys with the most
/// live permits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreSummary {
    /// Keys with a row in the table, held or lapsed (a key's rows stay after its permits lapse).
    pub keys: u64,
    /// Keys with at least one live permit.
    pub held_keys: u64,
    /// Permits live now, by the database clock, across every key.
    pub held: u64,
    /// The keys with the most live permits (most first, then by key), at most as many as asked.
    pub busiest: Vec<KeyPermits>,
}

/// A key's live permits in a [`SemaphoreSummary`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyPermits {
    /// The key.
    pub key: String,
    /// Its permits live now.
    pub held: u64,
    /// Its slots: the highest slot ever taken, plus one, the most permits its acquirers have
    /// needed at once. The table does not record the limit they ask for, which may be higher.
    pub slots: u32,
}

impl SemaphoreSummary {
    pub(super) fn from_rows(rows: Vec<SummaryRow>) -> SemaphoreSummary {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let mut summary = SemaphoreSummary::default();
        for row in rows {
            match row.key {
                None => {
                    summary.keys = count(row.keys.unwrap_or(0));
                    summary.held_keys = count(row.held_keys.unwrap_or(0));
                    summary.held = count(row.held);
                }
                Some(key) => summary.busiest.push(KeyPermits {
                    key,
                    held: count(row.held),
                    slots: row.slots.and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
                }),
            }
        }
        summary
    }
}
