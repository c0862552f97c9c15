//! When a loop's database call in progress began: the stop bound of a loop handle counts from
//! there, so that stopping many handles whose calls hang on the same outage takes one bound, not
//! one each (invariant 12).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When the loop's current database call began, if one is in progress.
#[derive(Debug, Default)]
pub(crate) struct Busy(Mutex<Option<Instant>>);

/// Marks the call in progress until dropped (also on unwinding).
pub(crate) struct Entered<'a>(&'a Busy);

impl Busy {
    /// Marks a database call beginning now; it ends when the guard is dropped.
    pub(crate) fn enter(&self) -> Entered<'_> {
        *self.0.lock() = Some(Instant::now());
        Entered(self)
    }

    /// How long a stop asked now waits for the loop: `bound`, counted from the beginning of the
    /// call in progress (a call that began `bound` ago or more gets no more time), else from now.
    pub(crate) fn wait(&self, bound: Duration) -> Duration {
        let now = Instant::now();
        match *self.0.lock() {
            Some(since) => since
                .checked_add(bound)
                .map_or(bound, |until| until.saturating_duration_since(now)),
            None => bound,
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        *self.0 .0.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_counts_from_the_call_in_progress() {
        let busy = Busy::default();
        let bound = Duration::from_secs(3);
        assert_eq!(busy.wait(bound), bound, "idle: the whole bound from now");
        let entered = busy.enter();
        assert!(busy.wait(bound) <= bound);
        *busy.0.lock() = Some(Instant::now() - Duration::from_secs(2));
        let left = busy.wait(bound);
        assert!(left <= Duration::from_secs(1), "{left:?}");
        *busy.0.lock() = Some(Instant::now() - Duration::from_secs(5));
        assert_eq!(
            busy.wait(bound),
            Duration::ZERO,
            "stuck past the bound: no more"
        );
        drop(entered);
        assert_eq!(busy.wait(bound), bound);
    }
}
