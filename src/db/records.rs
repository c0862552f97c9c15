//! The promotion records a [`Db`](crate::Db) has read, by table (see `promotion.rs`, which reads
//! them and holds grants off with them).

use std::collections::HashMap;
use std::time::SystemTime;

use parking_lot::Mutex;

use crate::statement::ByKey;

/// A table's promotion record as a grant passes it (`$7 $8 $9` of the grant statements).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Promotion {
    /// The server timeline the record names: a grant on any other is answered `stale`.
    pub(crate) timeline: i64,
    /// When a grant first saw that timeline; `None` when the record was made on it.
    pub(crate) seen_at: Option<SystemTime>,
    /// No lapsed or absent key or leadership is granted before it; `None`: nothing held off.
    pub(crate) grants_from: Option<SystemTime>,
    /// The longest TTL the record knows, in microseconds.
    pub(super) longest_ttl_us: i64,
}

/// The records this `Db` has read, by table (the key of the statement that reads the record).
#[derive(Debug, Default)]
pub(crate) struct Promotions(pub(super) Mutex<HashMap<u128, Promotion, ByKey>>);
