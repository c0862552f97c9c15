//! Who believes they hold each key, and since when: no lease may still say `is_held` after another
//! lease of its key was granted (checked among the threads of one process). The ledger proves the
//! writes safe; this proves the beliefs that guard unfenced work.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

#[derive(Default)]
pub struct Beliefs {
    current: Mutex<BTreeMap<String, (u64, Instant, i64, String)>>,
    next: AtomicU64,
    pub checks: AtomicU64,
    pub violations: AtomicU64,
}

impl Beliefs {
    /// Registers a lease just granted, if it is still held: a worker descheduled right after its
    /// acquire may only come to register once its lease has expired and another was granted. Checked
    /// under the lock, so the registered instant is one at which the lease was held, and a later
    /// registration always replaces an earlier one.
    pub fn granted(&self, key: &str, lease: &pgtenure::leases::Lease, owner: &str) -> u64 {
        let me = self.next.fetch_add(1, Ordering::SeqCst);
        let mut current = self.current.lock();
        let at = Instant::now();
        if lease.is_held() {
            current.insert(key.to_owned(), (me, at, lease.token(), owner.to_owned()));
        }
        me
    }

    /// Counts a violation when `lease` (registered as `me`) is still held after another lease of
    /// `key` was registered.
    pub fn check(&self, key: &str, me: u64, lease: &pgtenure::leases::Lease) {
        let at = Instant::now();
        if lease.is_held() {
            self.checks.fetch_add(1, Ordering::Relaxed);
            let current = self.current.lock().get(key).cloned();
            if let Some((other, since, token, owner)) = current {
                if other != me && since < at {
                    self.violations.fetch_add(1, Ordering::SeqCst);
                    eprintln!(
                        "{key}: lease {me} (token {}, deadline in {:?}, ttl {:?}) still held {:?} after \
                         lease {other} (token {token}, owner {owner}) was granted",
                        lease.token(),
                        lease.deadline().saturating_duration_since(Instant::now()),
                        lease.ttl(),
                        at - since,
                    );
                }
            }
        }
    }
}

impl Beliefs {
    /// Overlapping beliefs seen so far.
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::SeqCst)
    }
}
