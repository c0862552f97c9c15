//! Handover by notification (opt-in:
//! [`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications)): one listener
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
pub(crate) mod registry;

pub use self::registry::Freed;

use self::listener::start;
use super::conn::MakeTls;
use super::Db;
use crate::error::Result;
use crate::statement::StatementMode;
use crate::table_name::TableName;

impl Db {
    /// Starts the listener when `on` (a `Db` that [`DbBuilder`](crate::DbBuilder) built from `config`).
    pub(super) fn with_handover<T: MakeTls>(
        mut self,
        on: bool,
        config: &postgres::Config,
        tls: T,
        mode: StatementMode,
    ) -> Result<Db> {
        if on {
            let trust = mode == StatementMode::Protocol;
            self.handover = Some(start(config, tls, trust)?);
        }
        Ok(self)
    }

    /// Whether this `Db` sends handover notifications and keeps a listener for them
    /// ([`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications)).
    pub fn handover_notifications(&self) -> bool {
        self.handover.is_some()
    }

    /// Whether the handover listener is connected and listening now: `false` when notifications
    /// are off, before the listener first connected, while it reconnects, and for good when its
    /// connection was not proven to reach the server directly (a pooler). Waiters poll meanwhile.
    pub fn handover_listening(&self) -> bool {
        self.handover
            .as_ref()
            .is_some_and(|h| h.registry.is_listening())
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
            None => Freed::none(),
        }
    }
}
