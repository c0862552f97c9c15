//! When a managed lease renews, retries and gives up: pure arithmetic, no clock reads.

use std::time::{Duration, Instant};

/// Shortest TTL a managed lease ([`Leases::acquire`](super::Leases::acquire)) accepts: it renews
/// every third of it.
pub const MIN_MANAGED_TTL: Duration = Duration::from_millis(30);

const MIN_RETRY: Duration = Duration::from_millis(5);
const MAX_RETRY: Duration = Duration::from_secs(1);

/// How often a held lease renews: a third of its TTL, so two renewals can fail before it lapses.
pub(crate) fn renew_interval(ttl: Duration) -> Duration {
    ttl / 3
}

/// How soon a renewal that failed with a transient error is retried: a twelfth of the TTL, at least
/// 5 ms and at most 1 s, so several retries fit before the local deadline.
pub(crate) fn retry_interval(ttl: Duration) -> Duration {
    (ttl / 12).clamp(MIN_RETRY, MAX_RETRY)
}

/// When to try again after a failed renewal: after the retry interval, but never past the deadline
/// (at the deadline the lease is lost, and the attempt is only a check).
pub(crate) fn next_retry(now: Instant, ttl: Duration, deadline: Instant) -> Instant {
    (now + retry_interval(ttl)).min(deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewals_come_at_a_third_of_the_ttl() {
        assert_eq!(
            renew_interval(Duration::from_millis(300)),
            Duration::from_millis(100)
        );
        assert_eq!(renew_interval(MIN_MANAGED_TTL), Duration::from_millis(10));
        assert_eq!(
            renew_interval(Duration::from_secs(90)),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn retries_are_shorter_than_renewals_and_bounded() {
        assert_eq!(retry_interval(Duration::from_millis(30)), MIN_RETRY);
        assert_eq!(
            retry_interval(Duration::from_millis(600)),
            Duration::from_millis(50)
        );
        assert_eq!(retry_interval(Duration::from_secs(3600)), MAX_RETRY);
        for ms in [30, 100, 300, 1_000, 10_000] {
            let ttl = Duration::from_millis(ms);
            assert!(retry_interval(ttl) < renew_interval(ttl), "{ttl:?}");
        }
    }

    #[test]
    fn a_retry_never_lands_after_the_deadline() {
        let now = Instant::now();
        let ttl = Duration::from_secs(60);
        let deadline = now + Duration::from_millis(200);
        assert_eq!(next_retry(now, ttl, deadline), deadline);
        let far = now + Duration::from_secs(60);
        assert_eq!(next_retry(now, ttl, far), now + MAX_RETRY);
    }
}
