//! What a lease family and its threads share: the pool, the owner, the statements, the keys held,
//! the deadline watcher.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::sql::Statements;
use super::watcher::{Watch, Watcher};
use crate::db::Db;
use crate::error::Result;
use crate::table_name::TableName;

/// How often [`Leases::release`](super::Leases::release) also deletes rows that lapsed over an hour ago (a table scan).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// What a `Leases` family and its renewal threads share: the pool, the owner, the statements, the
/// keys its managed leases hold, and whether its last pool checkout failed. Renewal threads hold this
/// and not [`WatchedFamily`], so they never keep the deadline watcher alive.
pub(crate) struct Family {
    pub(super) db: Db,
    pub(super) owner: Arc<str>,
    pub(super) sql: Arc<Statements>,
    /// Keys held by managed leases of this family. A key leaves the set only once its lease's
    /// release has completed (or was never needed), so a second acquire in the family can never
    /// adopt a tenure whose release is still on its way.
    pub(super) held: Mutex<HashSet<String>>,
    /// When a pool checkout of this family last timed out, cleared by the next statement that ran:
    /// while set, releasing and dropping leases wait no later than a short while after it, so
    /// dropping many leases during an outage costs one short wait in all, not one each.
    pub(super) outage: Mutex<Option<Instant>>,
    pub(super) last_sweep: Mutex<Option<Instant>>,
}

impl Family {
    /// Forgets a managed lease of this family, once its release completed.
    pub(super) fn forget(&self, key: &str) {
        self.held.lock().remove(key);
    }

    /// Notes how a statement of this family went: a pool checkout that timed out starts an outage,
    /// anything that reached the database ends it.
    pub(super) fn note<T>(&self, result: &Result<T>) {
        match result {
            Ok(_) => *self.outage.lock() = None,
            Err(e) if e.is_pool_checkout() => {
                self.outage.lock().get_or_insert_with(Instant::now);
            }
            Err(_) => {}
        }
    }

    /// Since when the family's pool checkouts time out, if the last one did and nothing ran since.
    pub(super) fn outage_since(&self) -> Option<Instant> {
        *self.outage.lock()
    }

    /// Whether this release should also sweep long-lapsed rows (at most once a minute per family).
    pub(super) fn sweep_due(&self) -> bool {
        let mut last = self.last_sweep.lock();
        match *last {
            Some(at) if at.elapsed() < SWEEP_EVERY => false,
            _ => {
                *last = Some(Instant::now());
                true
            }
        }
    }
}

/// What a `Leases` handle and its clones share: the family and the deadline watcher (started with the
/// first managed lease, stopped when the last handle and lease are dropped).
pub(crate) struct WatchedFamily {
    pub(super) family: Arc<Family>,
    pub(super) watcher: Mutex<Option<Watcher>>,
}

impl std::ops::Deref for WatchedFamily {
    type Target = Family;

    fn deref(&self) -> &Family {
        &self.family
    }
}

impl WatchedFamily {
    pub(super) fn new(db: Db, owner: Arc<str>, table: TableName) -> Arc<WatchedFamily> {
        WatchedFamily::with_statements(db, owner, Statements::new(table))
    }

    /// A family whose managed tenures renew, fence and release with `sql` (a semaphore's permits:
    /// [`Statements::of_kind`]).
    pub(crate) fn with_statements(
        db: Db,
        owner: Arc<str>,
        sql: Arc<Statements>,
    ) -> Arc<WatchedFamily> {
        Arc::new(WatchedFamily {
            family: Arc::new(Family {
                db,
                owner,
                sql,
                held: Mutex::new(HashSet::new()),
                outage: Mutex::new(None),
                last_sweep: Mutex::new(None),
            }),
            watcher: Mutex::new(None),
        })
    }

    pub(super) fn watch(&self, watch: Watch) -> Result<()> {
        let mut watcher = self.watcher.lock();
        if watcher.is_none() {
            *watcher = Some(Watcher::start()?);
        }
        watcher.as_ref().expect("started above").send(watch);
        Ok(())
    }
}
