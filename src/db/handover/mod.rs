//! Handover by notification (opt-in: [`DbBuilder::handover_notifications`]): one listener
//! connection per [`Db`], outside the pool, that wakes the waiters of a key or a fleet as soon as
//! the statement that freed it commits, instead of at their next poll.
//!
//! The statements that free a key or a fleet (a lease's release, a leader's resignation) send
//! `pg_notify` on the table's channel ([`TableName::channel`]) with the key or fleet name, in the
//! same statement (no session state: it works through a transaction pooler too). The listener
//! (`listener.rs`) `LISTEN`s on the channels of the tables that have waiters and passes each
//! notification to the waiters of that key or fleet ([`Freed`]). A wake-up only makes a waiter poll
//! now: the poll decides. Without the listener (a pooler in between, a lost connection) waiters
//! poll as before.

mod listener;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, never, Receiver, Sender};
use parking_lot::Mutex;

use super::Db;
#[cfg(doc)]
use super::DbBuilder;
use crate::table_name::TableName;

use self::listener::start;

/// The waiters of each channel, by key or fleet name, and the listener's state; shared by the
/// `Db`, the listener's thread and every [`Freed`].
#[derive(Default)]
pub(crate) struct Registry {
    waiters: Mutex<HashMap<String, HashMap<String, Vec<(u64, Sender<()>)>>>>,
    next: AtomicU64,
    /// The listener is connected and listens on every channel with waiters.
    listening: AtomicBool,
    /// A channel gained its first waiter since the listener last looked.
    new_channel: AtomicBool,
}

impl Registry {
    fn register(self: &Arc<Self>, channel: String, key: String) -> Freed {
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
    fn wake(&self, channel: &str, key: &str) {
        if let Some(list) = self.waiters.lock().get(channel).and_then(|k| k.get(key)) {
            for (_, tx) in list {
                let _ = tx.try_send(());
            }
        }
    }

    /// Wakes every waiter of `channels` (all when `None`): what was freed while nobody listened
    /// there was missed, so they poll now.
    fn wake_all(&self, channels: Option<&[String]>) {
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
    fn channels(&self, always: bool) -> Option<Vec<String>> {
        if !self.new_channel.swap(false, Ordering::AcqRel) && !always {
            return None;
        }
        Some(self.waiters.lock().keys().cloned().collect())
    }

    /// No channel ever had a waiter.
    fn is_empty(&self) -> bool {
        self.waiters.lock().is_empty()
    }

    fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::Release);
    }
}

/// The listener of a [`Db`] with handover notifications: its thread, stopped and joined when the
/// last clone of the `Db` is dropped.
pub(crate) struct Handover {
    registry: Arc<Registry>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Handover {
    /// Stops the listener and joins it: within [`listener::TICK`] (100 ms), or the connect in
    /// progress (the connection's connect timeout, 5 s by default).
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                log::error!(target: "pgtenure::db", "the handover listener's thread panicked");
            }
        }
    }
}

/// A waiter's wake-ups for one key or fleet: a message on [`Freed::receiver`] when a statement freed
/// it (a release, a resignation, a `stop`) in a process whose [`Db`] has handover notifications on,
/// and after the listener (re)connected (what was freed meanwhile was missed). A hint only: poll,
/// and let the poll decide. Without a listener (notifications off, a pooler in between, the
/// listener's connection lost) nothing arrives: keep polling at the usual period. Dropping it stops
/// the wake-ups.
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

impl Db {
    /// Starts the listener when `on` (a `Db` that [`DbBuilder`] built from `config`).
    pub(super) fn with_handover<T: crate::db::conn::MakeTls>(
        mut self,
        on: bool,
        config: &postgres::Config,
        tls: T,
        mode: crate::statement::StatementMode,
    ) -> crate::error::Result<Db> {
        if on {
            let trust = mode == crate::statement::StatementMode::Protocol;
            self.handover = Some(start(config, tls, trust)?);
        }
        Ok(self)
    }

    /// Whether this `Db` sends handover notifications and keeps a listener for them
    /// ([`DbBuilder::handover_notifications`]).
    pub fn handover_notifications(&self) -> bool {
        self.handover.is_some()
    }

    /// Whether the handover listener is connected and listening now: `false` when notifications
    /// are off, before the listener first connected, while it reconnects, and for good when its
    /// connection was not proven to reach the server directly (a pooler). Waiters poll meanwhile.
    pub fn handover_listening(&self) -> bool {
        self.handover
            .as_ref()
            .is_some_and(|h| h.registry.listening.load(Ordering::Acquire))
    }

    /// The channel a statement freeing a key or fleet of `table` notifies, when notifications are
    /// on (its parameter; `None` sends nothing).
    pub(crate) fn freed_channel(&self, table: &TableName) -> Option<String> {
        self.handover.as_ref().map(|_| table.channel())
    }

    /// Wake-ups for `key` (a lease key, a fleet name) of `table`: none without notifications.
    pub(crate) fn watch_freed(&self, table: &TableName, key: &str) -> Freed {
        match &self.handover {
            Some(h) => h.registry.register(table.channel(), key.to_owned()),
            None => Freed {
                receiver: never(),
                slot: None,
            },
        }
    }
}
