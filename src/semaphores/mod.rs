//! Counting semaphores: at most N holders of a key at once, each permit with its own fencing token.
//!
//! "At most 3 instances run the export at once", "at most 10 concurrent calls to the partner API
//! across the fleet": [`Semaphore::acquire`] takes one of a key's N permits in one statement, or
//! answers `None` when all N are held (a refusal writes nothing). The [`Permit`] renews on a thread
//! of its own exactly as a managed lease does ([`crate::leases::Lease`]: every third of the TTL, a
//! local deadline taken before each statement is sent, loss on a channel at that deadline even
//! while the database hangs), and is released by [`Permit::release`] or by dropping it.
//!
//! # Permits are slots
//!
//! A key's permits are the rows of slots 0 to N - 1, one row per slot (the table's primary key is
//! the key and the slot), and an acquire asking for N permits takes only a slot below N: the
//! lowest one whose permit lapsed or was released, else the lowest one without a row yet. So:
//!
//! - **In the database**, a key never has more than N live permits among holders that ask for N:
//!   there are only N slots below N, and one row per slot.
//! - **Among the holders**, no more than N believe they hold a permit: each slot is a lease, and a
//!   holder stops believing at its local deadline, which never falls after the database's expiry
//!   (a slot is granted again only after that expiry).
//! - **Different N for one key** (a limit changed in a rolling deploy): an acquire asking for N
//!   looks only at the slots below N. Live permits never exceed the largest N asked; an acquire
//!   asking for N is granted only while fewer than N of the slots below N are held. Raising N takes
//!   effect at once; lowering it takes effect as the permits in the slots above the new N are
//!   released or lapse.
//!
//! Under contention two acquirers never take one slot: a lapsed slot is locked `FOR UPDATE SKIP
//! LOCKED` and re-checked, so the second passes to the next free slot; two acquirers inserting the
//! same new slot make the loser send its acquire once more, to find the next one.
//!
//! # Fencing
//!
//! Every permit is a tenure with a token of its own from the table's sequence (folding in the
//! server's timeline, as leases do: [`Db::with_timeline_tokens`](crate::Db::with_timeline_tokens)).
//! Protect each write with [`Permit::fence`] inside the write's own transaction: it locks the
//! permit's row `FOR SHARE` where key, owner and token match and the permit is live by
//! `clock_timestamp()`, so a permit that lapsed while its holder was paused fails its fence, and
//! no acquirer takes its slot while a fenced transaction is in progress: the acquire passes over
//! the locked row (it does not wait), and is refused when no other slot below its N is free, even
//! though [`Semaphore::holders`] shows the lapsed permit gone. Another
//! driver runs the same fence as a value, [`Permit::fence_statement`] ([`crate::fence`]).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # fn export(_: &mut pgtenure::postgres::Transaction<'_>) -> Result<(), pgtenure::postgres::Error> { Ok(()) }
//! use std::time::Duration;
//! use pgtenure::{Db, semaphores::Semaphore};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let exports = Semaphore::new(&db);
//! exports.create_table()?;
//!
//! // At most 3 instances export at once.
//! match exports.acquire("nightly-export", 3, Duration::from_secs(30))? {
//!     Some(permit) => {
//!         let mut conn = db.connection()?;
//!         let mut tx = conn.transaction()?;
//!         if permit.fence(&mut tx)? {
//!             export(&mut tx)?; // the protected write
//!             tx.commit()?;
//!         }
//!         permit.release()?;
//!     }
//!     None => {
//!         // three others hold the permits: try again later
//!         for holder in exports.holders("nightly-export")? {
//!             println!("slot {} held by {} until {:?}", holder.slot, holder.owner, holder.held_until);
//!         }
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Replication and failover
//!
//! As for leases: permits live on the primary, tokens only grow across a promotion, and after a
//! promotion with asynchronous replication no lapsed or new slot is granted until one longest TTL
//! has passed ([`Db::with_promotion_hold_off`](crate::Db::with_promotion_hold_off)); live permits
//! renew as usual.
//!
//! # Isolation
//!
//! The statements assume READ COMMITTED ([`Db::connect`](crate::Db::connect) pins it). Under a
//! stricter default a contended acquire can fail with
//! [`ErrorKind::Serialization`](crate::ErrorKind::Serialization); nothing was granted then.

mod permit;
mod sql;
mod views;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::permit::Permit;
pub use self::views::{KeyPermits, PermitInfo, SemaphoreSummary};
use crate::db::Db;
use crate::error::{Error, Result};
use crate::input::{check_key, micros, MAX_KEY_BYTES};
use crate::instance::default_owner;
use crate::leases::{Lease, WatchedFamily, MIN_MANAGED_TTL};
use crate::migrations::Kind;
use crate::table_name::TableName;

/// The table [`Semaphore::new`] uses unless [`Semaphore::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_semaphores";

/// The most permits an acquire may ask for: each refused acquire reads the key's slots below it.
pub const MAX_PERMITS: u32 = 10_000;

/// Checks an acquire's key, permits and TTL before anything is sent: the permits as the statement
/// takes them and the TTL in microseconds.
fn check_acquire(key: &str, permits: u32, ttl: Duration) -> Result<(i32, i64)> {
    check_key("semaphore key", key)?;
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::invalid_input(format!(
            "a semaphore of {permits} permits cannot be held; ask for 1 to {MAX_PERMITS} permits"
        )));
    }
    let ttl_us = micros("permit ttl", ttl, MIN_MANAGED_TTL)?;
    let permits = i32::try_from(permits).expect("bounded by MAX_PERMITS");
    Ok((permits, ttl_us))
}

/// Counting semaphores for one owner; see the [module docs](self).
///
/// Cheap to clone (clones share the deadline watcher of their permits), `Send` and `Sync`.
/// Configure it (`with_table`, `with_owner`) before use.
#[derive(Clone)]
pub struct Semaphore {
    db: Db,
    owner: Arc<str>,
    sql: Arc<sql::Statements>,
    /// The permits' renewals, fences and releases: the managed lease machinery on this table.
    family: Arc<WatchedFamily>,
}

impl Semaphore {
    /// Semaphores in the table `pgtenure_semaphores`, owned by a fresh owner name
    /// (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> Semaphore {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        Semaphore::build(db.clone(), default_owner().into(), table)
    }

    fn build(db: Db, owner: Arc<str>, table: TableName) -> Semaphore {
        let leases = crate::leases::Statements::of_kind(Kind::Semaphores, table.clone());
        Semaphore {
            family: WatchedFamily::with_statements(db.clone(), owner.clone(), leases),
            sql: sql::Statements::new(table),
            db,
            owner,
        }
    }

    /// Uses another table: `table` or `schema.table`, each part a plain identifier of at most 63
    /// bytes. Defaults to `pgtenure_semaphores`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(self, table: &str) -> Result<Semaphore> {
        let table = TableName::parse(table)?;
        Ok(Semaphore::build(self.db, self.owner, table))
    }

    /// Names the owner written into the permits' rows. Defaults to
    /// `"{hostname}-{pid}-{random hex}"`, distinct for every `Semaphore::new`. The owner is a
    /// label for operators and part of the fence: a permit belongs to its [`Permit`], and two
    /// permits of one owner are two permits.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `owner` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_owner(self, owner: &str) -> Result<Semaphore> {
        check_key("owner", owner)?;
        let table = self.sql.table.clone();
        Ok(Semaphore::build(self.db, owner.into(), table))
    }

    /// The owner written into held permits.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Creates the table and its token sequence, or brings them to this version's schema (see
    /// [`crate::migrations`]); a table at this version is left as it is. Every instance may call it
    /// at startup, all at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Schema`](crate::ErrorKind::Schema) when the table was migrated by a newer
    /// pgtenure or is recorded as another kind of pgtenure table; a database or connection error:
    /// creating needs `CREATE` on the schema, which must exist.
    pub fn create_table(&self) -> Result<()> {
        self.db
            .migrate_table(Kind::Semaphores, &self.sql.table)
            .map(drop)
    }

    /// Takes one of `key`'s `permits` permits for `ttl` and starts a thread that renews it every
    /// `ttl / 3`; `None` when the slots below `permits` are all held (see the
    /// [module docs](self) for what `permits` means when acquirers of a key ask for different
    /// numbers).
    ///
    /// One statement, one round trip; a refused acquire writes nothing. Under contention, when a
    /// slot that looked free was taken by another acquirer meanwhile, the acquire is sent again (at
    /// most `permits` more times, each after another acquirer won a slot). A statement whose
    /// outcome is unknown (the connection failed after it was sent) is not sent again: it may have
    /// granted a permit, which then lapses unused at its TTL, holding its slot until then.
    ///
    /// The local deadline counts from when the grant was sent on a pooled connection. If the
    /// grant's answer arrives after that deadline, the permit is returned already lost
    /// ([`LeaseLoss::Expired`](crate::leases::LeaseLoss::Expired) on its channel).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when the key
    /// is blank, contains a NUL byte or is over 1,024 bytes, `permits` is 0 or over
    /// [`MAX_PERMITS`], or `ttl` is under 30 ms or over 100 years. A database or connection error
    /// from the acquire (no permit is returned), or a [`ErrorKind::Setup`](crate::ErrorKind::Setup)
    /// error when the renewal thread could not be started (the permit then lapses at its TTL).
    pub fn acquire(&self, key: &str, permits: u32, ttl: Duration) -> Result<Option<Permit>> {
        let (asked, ttl_us) = check_acquire(key, permits, ttl)?;
        let answer = self.acquire_statement(key, asked, ttl_us)?;
        crate::observe::semaphore_acquire(answer.is_some());
        let Some((slot, token, sent)) = answer else {
            log::debug!(target: "pgtenure::semaphores", "semaphore {key:?}: all {permits} permits are held");
            return Ok(None);
        };
        let lease = Lease::start(self.family.clone(), key, token, ttl, ttl_us, sent)?;
        log::debug!(
            target: "pgtenure::semaphores",
            "acquired permit {slot} of {permits} of semaphore {key:?} with token {token}"
        );
        let slot = u32::try_from(slot).unwrap_or(0);
        Ok(Some(Permit::new(lease, slot, permits)))
    }

    /// The acquire statement, sent again while it answers contended: `(slot, token, sent)` when
    /// granted, `sent` being the instant before the statement that granted it was sent.
    fn acquire_statement(
        &self,
        key: &str,
        permits: i32,
        ttl_us: i64,
    ) -> Result<Option<(i32, i64, Instant)>> {
        let (db, sql, owner) = (&self.db, &self.sql, &self.owner);
        sql.check_schema(db)?;
        // Each contended answer means another acquirer made a slot below `permits` that had no
        // row: after at most `permits` of them every slot has a row, and no answer is contended.
        for _ in 0..=permits {
            let (answer, sent) = db.grant(&sql.promotion, ttl_us, |promotion| {
                sql.acquire(db, key, owner, ttl_us, permits, promotion)
            })?;
            if let Some((slot, token)) = answer.granted {
                return Ok(Some((slot, token, sent)));
            }
            if !answer.contended {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Runs `f` while holding one of `key`'s `permits` permits, iff one can be acquired.
    ///
    /// The permit renews while `f` runs; `f` gets the [`Permit`] to watch for loss
    /// ([`Permit::lost`], [`Permit::is_held`]) and to fence its writes. The permit is released when
    /// `f` returns, and when it unwinds from a panic. Returns `Ok(Some(value))` when `f` ran,
    /// `Ok(None)` when every permit is held. A failed release after `f` ran is logged, and the
    /// value returned: the permit lapses at its expiry.
    ///
    /// # Errors
    ///
    /// The errors of [`Semaphore::acquire`], returned instead of running `f`.
    pub fn with_permit<T>(
        &self,
        key: &str,
        permits: u32,
        ttl: Duration,
        f: impl FnOnce(&Permit) -> T,
    ) -> Result<Option<T>> {
        let Some(permit) = self.acquire(key, permits, ttl)? else {
            return Ok(None);
        };
        let value = f(&permit);
        if let Err(e) = permit.release() {
            log::warn!(target: "pgtenure::semaphores", "with_permit could not release {key:?}: {e}");
        }
        Ok(Some(value))
    }

    /// The live permits of `key` by the database clock, by slot (every slot, whatever N its
    /// acquirer asked for); empty when nobody holds one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a
    /// database or connection error.
    pub fn holders(&self, key: &str) -> Result<Vec<PermitInfo>> {
        check_key("semaphore key", key)?;
        let rows = self.sql.holders(&self.db, key)?;
        Ok(rows.into_iter().map(PermitInfo::from_row).collect())
    }

    /// The live permits of every key that starts with `prefix` (`""` for every key), by key and
    /// slot, by the database clock. It reads the whole table: for operators, not for a hot path.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the prefix contains a NUL
    /// byte or is longer than a key; otherwise a database or connection error.
    pub fn list(&self, prefix: &str) -> Result<Vec<PermitInfo>> {
        if prefix.contains('\0') || prefix.len() > MAX_KEY_BYTES {
            return Err(Error::invalid_input(format!(
                "semaphore key prefix is {} bytes long or contains a NUL byte; keys are at most \
                 {MAX_KEY_BYTES} bytes, of text without NUL",
                prefix.len()
            )));
        }
        let rows = self.sql.list(&self.db, prefix)?;
        Ok(rows.into_iter().map(PermitInfo::from_row).collect())
    }

    /// The table at a glance, for monitoring: how many keys, how many live permits, and the
    /// `busiest` keys with the most live permits. One statement, which reads the table once on the
    /// server and sends at most `busiest + 1` rows. What the command's exporter scrapes.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn summary(&self, busiest: usize) -> Result<SemaphoreSummary> {
        let busiest = i64::try_from(busiest).unwrap_or(i64::MAX);
        let rows = self.sql.summary(&self.db, busiest)?;
        Ok(SemaphoreSummary::from_rows(rows))
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("table", &self.sql.table)
            .field("owner", &self.owner)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_is_checked_before_anything_is_sent() {
        assert_eq!(
            check_acquire("k", 3, Duration::from_secs(1)).unwrap(),
            (3, 1_000_000)
        );
        assert!(check_acquire("k", MAX_PERMITS, MIN_MANAGED_TTL).is_ok());
        for (key, permits, ttl) in [
            ("", 3, Duration::from_secs(1)),
            (" \t", 3, Duration::from_secs(1)),
            ("a\0b", 3, Duration::from_secs(1)),
            ("k", 0, Duration::from_secs(1)),
            ("k", MAX_PERMITS + 1, Duration::from_secs(1)),
            ("k", 3, Duration::from_millis(29)),
            ("k", 3, crate::input::MAX_DURATION + Duration::from_secs(1)),
        ] {
            let err = check_acquire(key, permits, ttl).unwrap_err();
            assert!(err.is_invalid_input(), "{key:?} {permits} {ttl:?}: {err}");
        }
        let long = "k".repeat(1025);
        assert!(check_acquire(&long, 3, Duration::from_secs(1)).is_err());
        let err = check_acquire("k", 0, Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("1 to 10000 permits"), "{err}");
    }
}
