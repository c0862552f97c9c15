//! What pgtenure keeps with each pooled connection: how it sends statements, and those prepared on
//! it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use super::direct::Seen;
use super::mode::{StatementMode, Way};

/// What pgtenure keeps with each pooled connection (in its r2d2 extensions): how it sends
/// statements, and those prepared on it.
#[derive(Default)]
pub(crate) struct Cache {
    /// The mode the way was decided under: `None` until the first statement.
    pub(super) mode: Option<StatementMode>,
    /// The way in force (`Sql` once a pooler was found on this connection).
    pub(super) way: Option<Way>,
    /// The backend the session was first seen on, when it was asked.
    pub(super) pid: Option<i32>,
    /// What the session said of the server when it was asked (once per connection).
    pub(super) seen: Option<Seen>,
    /// Set when this connection found a pooler; the `Db`'s record takes it up.
    pub(super) pooler_found: bool,
    /// This call found its prepared statement gone from the server connection (26000).
    pub(super) missed: bool,
    /// How many calls in a row found it gone.
    misses: u32,
    /// Prepared statements keep vanishing from this connection's server connections (a pooler
    /// that resets them after every transaction): its statements are sent unprepared for good.
    pub(super) vanishing: bool,
    /// Set when this connection found that; the `Db`'s record takes it up.
    pub(super) vanishing_found: bool,
    /// The SQL-level statements prepared on the connection, by key.
    pub(super) sql: HashSet<u128, ByKey>,
    /// The protocol-level statements prepared on the connection, by key (the key of pgtenure's
    /// content-addressed name).
    pub(super) protocol: HashMap<u128, postgres::Statement, ByKey>,
    /// Protocol-level statements a reset session lost: dropped with the connection (dropping one
    /// sends a `Close`, which a reset session does not need), or in a batch once there are many.
    lost: Vec<postgres::Statement>,
}

/// How many lost protocol-level statements a connection keeps before dropping them.
const MAX_LOST: usize = 1024;

/// How many calls in a row that find their prepared statement gone make a connection send its
/// statements unprepared: each such call paid up to seven round trips instead of one.
const MISSES_BEFORE_UNPREPARED: u32 = 3;

impl Cache {
    /// A call ended: it found its statement gone, or not.
    pub(super) fn end_call(&mut self) {
        if !std::mem::take(&mut self.missed) {
            self.misses = 0;
            return;
        }
        self.misses += 1;
        if self.misses >= MISSES_BEFORE_UNPREPARED && !self.vanishing {
            self.vanishing = true;
            self.vanishing_found = true;
            self.way = Some(Way::Unprepared);
        }
    }

    /// The session was reset: its protocol-level statements are gone.
    pub(super) fn lost_protocol(&mut self) {
        self.lost.extend(self.protocol.drain().map(|(_, s)| s));
        if self.lost.len() > MAX_LOST {
            self.lost.clear();
        }
    }

    /// A pooler is in between: SQL-level statements from now on. The protocol-level ones are
    /// forgotten without a `Close`, which could close another client's statement of that name.
    pub(super) fn found_pooler(&mut self) {
        self.pooler_found = true;
        self.way = Some(Way::Sql);
        for (_, statement) in self.protocol.drain() {
            std::mem::forget(statement);
        }
        for statement in self.lost.drain(..) {
            std::mem::forget(statement);
        }
    }
}

/// The hasher of a statement's key: the key is 16 bytes of a SHA-256 digest already, so its low 64
/// bits are the hash (no SipHash of a name per call, and a cache made without `RandomState`).
pub(crate) type ByKey = BuildHasherDefault<KeyHasher>;

/// See [`ByKey`].
#[derive(Default)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only keys are hashed (as `write_u128`); anything else still hashes, if poorly.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u128(&mut self, key: u128) {
        self.0 = key as u64;
    }
}
