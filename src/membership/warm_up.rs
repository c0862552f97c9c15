//! The wait before a process's first claim in a cold fleet (one where no live process owns a unit):
//! until every other live process it sees has settled (heartbeated twice, see
//! [`Config::warm_up`](super::Config::warm_up)), and, when a warm-up duration is set, until they
//! have been the same set for it. So processes started together (a deploy, a cold start) each
//! claim their share once instead of the first one claiming every unit and shedding most of them
//! a round later (Kafka's `group.initial.rebalance.delay.ms`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

/// A process's warm-up: over once every other live process it sees has settled (with the
/// probation) and has been the same set for `wait`, or `most` after its first look whatever they
/// did, or once it owns a unit; then over for good.
#[derive(Debug)]
pub(super) struct WarmUp {
    wait: Duration,
    /// Whether the others must have settled.
    probation: bool,
    /// The longest warm-up, from the first look: a live set that never holds still or never
    /// settles (an instance crash-looping under a new id each time, a slow scale-out) must not keep
    /// every unit unowned.
    most: Duration,
    /// When this process first looked (local clock).
    first: Option<Instant>,
    /// A digest of the other live processes' ids, and since when (local clock) it is the same.
    seen: Option<(u64, Instant)>,
    over: bool,
}

impl WarmUp {
    pub(super) fn new(wait: Duration, probation: bool, most: Duration) -> WarmUp {
        WarmUp {
            wait,
            probation,
            most: most.max(wait),
            first: None,
            seen: None,
            over: wait.is_zero() && !probation,
        }
    }

    /// Whether a process that sees `others` live at `now` (each with whether it has settled) may
    /// claim: once they have all settled (with the probation) and been the same set for the
    /// warm-up (a change starts it again), or the longest warm-up has passed since the first look,
    /// and from then on.
    pub(super) fn may_claim<'a>(
        &mut self,
        others: impl IntoIterator<Item = (&'a str, bool)>,
        now: Instant,
    ) -> bool {
        if self.over {
            return true;
        }
        let mut settled = true;
        let mut ids: Vec<&str> = others
            .into_iter()
            .map(|(id, s)| {
                settled &= s;
                id
            })
            .collect();
        ids.sort_unstable();
        let mut hasher = DefaultHasher::new();
        ids.hash(&mut hasher);
        let digest = hasher.finish();
        let first = *self.first.get_or_insert(now);
        if now.saturating_duration_since(first) >= self.most {
            self.over = true;
            return true;
        }
        let still = match self.seen {
            Some((seen, since)) if seen == digest => {
                now.saturating_duration_since(since) >= self.wait
            }
            _ => {
                self.seen = Some((digest, now));
                self.wait.is_zero()
            }
        };
        self.over = still && (settled || !self.probation);
        self.over
    }

    /// The process owns units already (its own, read back after a restart under the same id):
    /// nothing to wait for.
    pub(super) fn end(&mut self) {
        self.over = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled<'a>(ids: &'a [&'a str]) -> impl Iterator<Item = (&'a str, bool)> {
        ids.iter().map(|id| (*id, true))
    }

    #[test]
    fn a_process_claims_once_the_live_set_held_still_for_the_warm_up() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut warm = WarmUp::new(Duration::from_millis(500), true, Duration::from_secs(60));
        assert!(!warm.may_claim(settled(&["b"]), at(0)), "first look");
        assert!(!warm.may_claim(settled(&["b"]), at(400)));
        // Another process joins: the wait starts again.
        assert!(!warm.may_claim(settled(&["c", "b"]), at(450)));
        assert!(
            !warm.may_claim(settled(&["b", "c"]), at(900)),
            "the same set, in any order"
        );
        assert!(warm.may_claim(settled(&["b", "c"]), at(950)));
        // Over for good: joins and leaves no longer hold it back.
        assert!(warm.may_claim(settled(&["b"]), at(960)));
    }

    #[test]
    fn by_default_a_process_claims_once_every_other_live_process_has_settled() {
        let now = Instant::now();
        let mut warm = WarmUp::new(Duration::ZERO, true, Duration::from_secs(60));
        assert!(!warm.may_claim([("b", true), ("c", false)], now));
        assert!(!warm.may_claim([("b", true), ("c", false)], now));
        assert!(
            warm.may_claim([("b", true), ("c", true)], now),
            "no wall-clock wait: at once"
        );
        assert!(warm.may_claim([("d", false)], now), "over for good");
        let mut alone = WarmUp::new(Duration::ZERO, true, Duration::from_secs(60));
        assert!(alone.may_claim([], now), "nobody else to wait for");
    }

    #[test]
    fn a_live_set_that_never_holds_still_or_settles_ends_the_warm_up_at_its_longest() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for wait in [Duration::ZERO, Duration::from_millis(300)] {
            let mut warm = WarmUp::new(wait, true, Duration::from_millis(1300));
            // A crash-looping instance: a new id every 100 ms, dead before it settles.
            for i in 0..13u64 {
                let id = format!("crashed-{i}");
                assert!(!warm.may_claim([(id.as_str(), false)], at(i * 100)));
            }
            assert!(warm.may_claim([("crashed-13", false)], at(1300)));
            assert!(
                warm.may_claim([("crashed-14", false)], at(1400)),
                "over for good"
            );
        }
    }

    #[test]
    fn a_zero_warm_up_or_owned_units_end_it_at_once() {
        let now = Instant::now();
        assert!(WarmUp::new(Duration::ZERO, false, Duration::ZERO).may_claim([("x", false)], now));
        let mut warm = WarmUp::new(Duration::from_secs(5), true, Duration::from_secs(20));
        assert!(!warm.may_claim([], now));
        warm.end();
        assert!(warm.may_claim([("x", false)], now));
    }
}
