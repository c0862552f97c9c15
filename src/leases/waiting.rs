//! A waiting acquire ([`Leases::acquire_waiting`], as `etcdctl lock` waits): tried again at every
//! retry period, and at once when a release of the key wakes it (handover notifications).

use std::time::{Duration, Instant};

use crossbeam_channel::select;

use super::{check_acquire, Lease, Leases};
use crate::db::Freed;
use crate::error::Result;
use crate::input::{check_key, micros, MIN_DURATION};

/// How often a waiting acquire tries again without a wake-up, unless
/// [`Leases::with_retry_period`] says otherwise.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(1);

impl Leases {
    /// How often [`Leases::acquire_waiting`] tries again while the key is held elsewhere, when no
    /// wake-up comes first. Defaults to [`DEFAULT_RETRY_PERIOD`] (1 s). With handover
    /// notifications on ([`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications))
    /// a release wakes the wait at once, so the period only bounds how late a lapse (a holder that
    /// died) or a missed notification is noticed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `period` is under 1 ms or
    /// over 100 years.
    pub fn with_retry_period(mut self, period: Duration) -> Result<Leases> {
        micros("lease retry period", period, MIN_DURATION)?;
        self.retry = period;
        Ok(self)
    }

    /// See [`Leases::with_retry_period`].
    pub fn retry_period(&self) -> Duration {
        self.retry
    }

    /// Acquires `key` for `ttl` as [`Leases::acquire`] does, waiting up to `wait` while it is held
    /// elsewhere: tried again every retry period ([`Leases::with_retry_period`]), and at once when
    /// a release of the key (a [`Lease::release`], a dropped lease, [`Leases::release`]) in a
    /// process with handover notifications on wakes it ([`Leases::watch_released`]). A wake-up
    /// grants nothing: the acquire that follows decides. `Ok(None)` when not acquired within
    /// `wait` (a `wait` of zero tries once).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, as for
    /// [`Leases::acquire`], and for a `wait` over 100 years; the first error of an acquire
    /// (nothing is held then).
    pub fn acquire_waiting(
        &self,
        key: &str,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Option<Lease>> {
        check_acquire(key, ttl)?;
        micros("acquire wait", wait, Duration::ZERO)?;
        // Before the first try: a release between that try and the wait still wakes it.
        let freed = self.watch_released(key)?;
        let until = Instant::now() + wait;
        loop {
            if let Some(lease) = self.acquire(key, ttl)? {
                return Ok(Some(lease));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            select! {
                recv(freed.receiver()) -> _ => {}
                default(left.min(self.retry)) => {}
            }
        }
    }

    /// Wake-ups when `key` is released in a process whose [`Db`](crate::Db) has handover
    /// notifications on (a message on [`Freed::receiver`]), for a waiting loop of the caller's own
    /// around [`Leases::try_acquire`] or [`Leases::acquire`]: try at once on one, rather than at
    /// the next period. Nothing arrives without notifications or their listener: keep polling.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key.
    pub fn watch_released(&self, key: &str) -> Result<Freed> {
        check_key("lease key", key)?;
        Ok(self.shared.db.watch_freed(&self.shared.sql.table, key))
    }
}
