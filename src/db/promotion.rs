//! The promotion record beside each lease and leader table (`sql/schema/create_promotion.sql`):
//! read once per [`Db`] and table, and passed to every grant as parameters, so that a grant's
//! statement never reads another table (see [`Db::with_promotion_hold_off`]).

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use parking_lot::Mutex;

use super::{Db, Policy};
use crate::error::{Error, ErrorKind, Result};
use crate::statement::Statement;

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
    longest_ttl: i64,
}

/// The record statement's parameter: the longest TTL in microseconds (`sql/schema/promotion.sql`).
type Record = (i64,);

/// The records this `Db` has read, by table (the rendered name of the record).
#[derive(Debug, Default)]
pub(crate) struct Promotions(Mutex<HashMap<String, Promotion>>);

impl Db {
    /// The timeline of the promotion record this `Db` read through `record`, for renewals to say
    /// when the server is on another one; `None` when nothing is held off or nothing was read.
    pub(crate) fn promotion_timeline(&self, record: &Statement) -> Option<i64> {
        if !self.promotion_hold_off() || !self.timeline_tokens() {
            return None;
        }
        self.promotions
            .0
            .lock()
            .get(record.name::<Record>())
            .map(|known| known.timeline)
    }

    /// The promotion record of the table whose record statement is `record`, as this `Db` last
    /// read it: read (one statement) the first time, when `reread` (a grant was answered that the
    /// server is on another timeline), and when `ttl_us` is longer than any TTL the record knows
    /// (which it raises first, so that the hold-off after a promotion covers this grant's
    /// holder). Without the hold-off ([`Db::with_promotion_hold_off`]) nothing is read. `until`
    /// bounds the wait for a pool connection (a renewal thread's read must not delay its next
    /// renewal).
    pub(crate) fn promotion(
        &self,
        record: &Statement,
        ttl_us: i64,
        reread: bool,
        until: Option<Instant>,
    ) -> Result<Promotion> {
        if !self.promotion_hold_off() || !self.timeline_tokens() {
            // Nothing held off: the grant statements then neither gate nor answer `stale`.
            return Ok(Promotion::default());
        }
        let name = record.name::<Record>();
        if !reread {
            if let Some(known) = self.promotions.0.lock().get(name) {
                if ttl_us <= known.longest_ttl {
                    return Ok(*known);
                }
            }
        }
        let policy = match until {
            Some(until) => Policy::IDEMPOTENT.until(until),
            None => Policy::IDEMPOTENT,
        };
        let rows = self.query("read promotion record", policy, record, &(ttl_us,))?;
        let Some(row) = rows.first() else {
            return Err(Error::new(
                ErrorKind::Database,
                "read promotion record failed: the table's promotion record (<table>_promotion) \
                 has no row; drop that record table and call create_table() or \
                 pgtenure::migrate() to make it again"
                    .to_owned(),
            ));
        };
        let read = Promotion {
            timeline: row.get("timeline"),
            seen_at: row.get("seen_at"),
            grants_from: row.get("grants_from"),
            longest_ttl: row.get("longest_ttl"),
        };
        let mut known = self.promotions.0.lock();
        let before = known.insert(name.to_owned(), read);
        if read.seen_at.is_some() && before.is_none_or(|b| b.timeline != read.timeline) {
            log::info!(
                target: "pgtenure::db",
                "the server is on timeline {}, first seen by a grant at {:?}: lapsed keys and \
                 leaderships are granted again from {:?} (Db::with_promotion_hold_off)",
                read.timeline,
                read.seen_at,
                read.grants_from
            );
        }
        Ok(read)
    }
}
