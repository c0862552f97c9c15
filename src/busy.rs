//! When a loop's database call in progress began: the stop bound of a loop handle counts from
//! there, so that stopping many handles whose calls hang on the same outage takes one bound, not
//! one each (invariant 12). The application's callbacks the loop runs (hooks, a reconciler) are
//! not database calls: a slow one does not eat into the bound.

use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// When the loop's current database call began, and on which thread, if one is in progress.
#[derive(Debug, Default)]
pub(crate) struct Busy(Mutex<Option<(Instant, ThreadId)>>);

/// Marks the call in progress until dropped (also on unwinding).
pub(crate) struct Entered<'a>(&'a Busy);

/// Suspends the mark while the loop's thread runs the application's code; restarts it when
/// dropped.
pub(crate) struct Paused<'a>(&'a Busy, bool);

impl Busy {
    /// Marks a database call beginning now on this thread; it ends when the guard is dropped.
    pub(crate) fn enter(&self) -> Entered<'_> {
        *self.0.lock() = Some((Instant::now(), thread::current().id()));
        Entered(self)
    }

    /// Suspends the mark while the application's code runs, when this thread is the one that
    /// entered (another thread delivering changes nothing).
    pub(crate) fn pause(&self) -> Paused<'_> {
        let mut mark = self.0.lock();
        let mine = matches!(*mark, Some((_, id)) if id == thread::current().id());
        if mine {
            *mark = None;
        }
        Paused(self, mine)
    }

    /// How long a stop asked now waits for the loop: `bound`, counted from the beginning of the
    /// call in progress (a call that began `bound` ago or more gets no more time), else from now.
    pub(crate) fn wait(&self, bound: Duration) -> Duration {
        let now = Instant::now();
        match *self.0.lock() {
            Some((since, _)) => since
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

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        if self.1 {
            *self.0 .0.lock() = Some((Instant::now(), thread::current().id()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn began(busy: &Busy, ago: Duration) {
        *busy.0.lock() = Some((Instant::now() - ago, thread::current().id()));
    }

    #[test]
    fn the_wait_counts_from_the_call_in_progress() {
        let busy = Busy::default();
        let bound = Duration::from_secs(3);
        assert_eq!(busy.wait(bound), bound, "idle: the whole bound from now");
        let entered = busy.enter();
        assert!(busy.wait(bound) <= bound);
        began(&busy, Duration::from_secs(2));
        let left = busy.wait(bound);
        assert!(left <= Duration::from_secs(1), "{left:?}");
        began(&busy, Duration::from_secs(5));
        assert_eq!(
            busy.wait(bound),
            Duration::ZERO,
            "stuck past the bound: no more"
        );
        drop(entered);
        assert_eq!(busy.wait(bound), bound);
    }

    #[test]
    fn the_applications_code_does_not_count_and_other_threads_change_nothing() {
        let busy = Busy::default();
        let bound = Duration::from_secs(3);
        let _entered = busy.enter();
        began(&busy, Duration::from_secs(5));
        thread::scope(|s| {
            s.spawn(|| {
                let _paused = busy.pause();
                assert_eq!(
                    busy.wait(bound),
                    Duration::ZERO,
                    "another thread's pause: none"
                );
            });
        });
        {
            let _paused = busy.pause();
            assert_eq!(
                busy.wait(bound),
                bound,
                "a callback: the whole bound from now"
            );
        }
        assert!(
            busy.wait(bound) > Duration::from_secs(2),
            "restarted after the callback"
        );
    }
}
