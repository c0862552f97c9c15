//! The waiters of each key or fleet, the listener's handle and a waiter's [`Freed`].

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, never, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

/// A channel's waiters: by key or fleet name, each with its registration's id.
type Keys = HashMap<String, Vec<(u64, Sender<()>)>>;

/// The waiters of each channel, by key or fleet name, and the listener's state; shared by the
/// `Db`, the listener's thread and every [`Freed`].
#[derive(Default)]
pub(crate) struct Registry {
    waiters: Mutex<HashMap<String, Keys>>,
    next: AtomicU64,
    /// The listener is connected and listens on every channel with waiters.
    listening: AtomicBool,
    /// A channel gained its first waiter since the listener last looked.
    new_channel: AtomicBool,
}

impl Registry {
    pub(super) fn register(self: &Arc<Self>, channel: String, key: String) -> Freed {
        let (tx, rx) = bounded(1);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut waiters = self.waiters.lock();
        let keys = waiters.entry(channel.clone()).or_insert_with(|| {
            self.new_channel.store(true, Ordering::Release);
            HashMap::new()
        });
        keys.entry(key.clone()).or_default().push((id, tx));
        Freed {
            receiver: rx,
            slot: Some(Slot {
                registry: Arc::clone(self),
                channel,
                key,
                id,
            }),
        }
    }

    fn unregister(&self, channel: &str, key: &str, id: u64) {
        let mut waiters = self.waiters.lock();
        let Some(keys) = waiters.get_mut(channel) else {
            return;
        };
        if let Some(list) = keys.get_mut(key) {
            list.retain(|(i, _)| *i != id);
            if list.is_empty() {
                keys.remove(key);
            }
        }
        // The channel stays listened on: a table that had waiters is likely to have them again.
    }

    /// Wakes the waiters of `key` on `channel` (a wake-up not yet taken stands for this one too).
    pub(super) fn wake(&self, channel: &str, key: &str) {
        if let Some(list) = self.waiters.lock().get(channel).and_then(|k| k.get(key)) {
            for (_, tx) in list {
                let _ = tx.try_send(());
            }
        }
    }

    /// Wakes every waiter of `channels` (all when `None`): what was freed while nobody listened
    /// there was missed, so they poll now.
    pub(super) fn wake_all(&self, channels: Option<&[String]>) {
        let waiters = self.waiters.lock();
        for (channel, keys) in waiters.iter() {
            if channels.is_some_and(|c| !c.contains(channel)) {
                continue;
            }
            for (_, tx) in keys.values().flatten() {
                let _ = tx.try_send(());
            }
        }
    }

    /// The channels with waiters, if one was added since the last call (or `always`).
    pub(super) fn channels(&self, always: bool) -> Option<Vec<String>> {
        if !self.new_channel.swap(false, Ordering::AcqRel) && !always {
            return None;
        }
        Some(self.waiters.lock().keys().cloned().collect())
    }

    /// No channel ever had a waiter.
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.lock().is_empty()
    }

    pub(super) fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Release);
    }

    pub(super) fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }
}

/// The listener of a [`Db`] with handover notifications: its thread, stopped and joined when the
/// last clone of the `Db` is dropped.
pub(crate) struct Handover {
    pub(super) registry: Arc<Registry>,
    pub(super) stop: Option<Sender<()>>,
    pub(super) thread: Option<JoinHandle<()>>,
    /// Disconnected once the thread has ended.
    pub(super) done: Receiver<()>,
    /// How long dropping waits for the thread: the connect timeout and two ticks.
    pub(super) join_bound: Duration,
}

impl Drop for Handover {
    /// Stops the listener and joins it: within its tick (100 ms), or the connect in progress
    /// (the connection's connect timeout, 5 s by default). A database that accepted the
    /// connection and answers nothing (a hung server or proxy: the peer's kernel still
    /// acknowledges, so neither the connect timeout nor keepalives end the wait) holds the thread
    /// past that: it is then left to end on its own when the database answers or the connection
    /// fails (it has nothing to decide or write), and a warning says so, rather than the drop
    /// hanging as long as the database does.
    fn drop(&mut self) {
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return;
        };
        match self.done.recv_timeout(self.join_bound) {
            Err(RecvTimeoutError::Timeout) => {
                log::warn!(target: "pgtenure::db", "the handover listener is blocked on the database for over {:?}; it ends on its own once the database answers or its connection fails", self.join_bound);
            }
            _ => {
                if thread.join().is_err() {
                    log::error!(target: "pgtenure::db", "the handover listener's thread panicked");
                }
            }
        }
    }
}

/// A waiter's wake-ups for one key or fleet: a message on [`Freed::receiver`] when a statement
/// freed it (a release, a force release, a resignation, a `stop`) in a process whose
/// [`Db`](crate::Db) has handover notifications on, and after the listener (re)connected (what was
/// freed meanwhile was missed). A hint only: poll, and let the poll decide. Without a listener
/// (notifications off, a pooler in between, the listener's connection lost) nothing arrives: keep
/// polling at the usual period. Dropping it stops the wake-ups.
pub struct Freed {
    receiver: Receiver<()>,
    slot: Option<Slot>,
}

struct Slot {
    registry: Arc<Registry>,
    channel: String,
    key: String,
    id: u64,
}

impl Freed {
    /// Wake-ups that never come (no notifications).
    pub(super) fn none() -> Freed {
        Freed {
            receiver: never(),
            slot: None,
        }
    }

    /// Receives `()` when the key or fleet may have been freed; at most one wake-up waits unread
    /// (later ones merge into it). Use it in a `select!` beside the poll's timer.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.receiver
    }
}

impl Drop for Freed {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.registry.unregister(&slot.channel, &slot.key, slot.id);
        }
    }
}

impl fmt::Debug for Freed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Freed")
            .field("key", &self.slot.as_ref().map(|s| &s.key))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notification_wakes_the_waiters_of_its_key_only_and_merges() {
        let registry = Arc::new(Registry::default());
        assert!(registry.is_empty());
        let a = registry.register("pgtenure:t".into(), "a".into());
        let a2 = registry.register("pgtenure:t".into(), "a".into());
        let b = registry.register("pgtenure:t".into(), "b".into());
        let other = registry.register("pgtenure:u".into(), "a".into());
        assert_eq!(registry.channels(false).map(|c| c.len()), Some(2));
        assert_eq!(registry.channels(false), None, "no new channel since");
        registry.wake("pgtenure:t", "a");
        registry.wake("pgtenure:t", "a");
        assert!(a.receiver().try_recv().is_ok());
        assert!(
            a.receiver().try_recv().is_err(),
            "two wake-ups merge into one"
        );
        assert!(a2.receiver().try_recv().is_ok());
        assert!(b.receiver().try_recv().is_err());
        assert!(other.receiver().try_recv().is_err());
        registry.wake_all(Some(&["pgtenure:u".to_owned()]));
        assert!(other.receiver().try_recv().is_ok());
        assert!(b.receiver().try_recv().is_err());
        registry.wake_all(None);
        assert!(b.receiver().try_recv().is_ok());
        drop((a, a2));
        assert!(!registry.waiters.lock()["pgtenure:t"].contains_key("a"));
        // Waking a key nobody waits for is nothing.
        registry.wake("pgtenure:t", "a");
        registry.wake("pgtenure:none", "a");
        assert!(Freed::none().receiver().try_recv().is_err());
    }
}
