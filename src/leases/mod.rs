//! Keyed leases: one holder per key, fencing tokens, managed renewal.
//!
//! A lease row holds a key for an owner until `held_until`, computed by PostgreSQL's `now()`. Every
//! new tenure of a key (a grant to an owner that did not hold it live) draws a fencing token from a
//! sequence, so tokens grow with every tenure and never repeat, even after rows are deleted.
//!
//! Two ways to hold a lease:
//!
//! - **Managed**: [`Leases::acquire`] returns a [`Lease`] with a renewal thread of its own and a
//!   loss channel; [`Leases::with_lease`] runs a closure while holding one. Within one `Leases`
//!   family (a handle and its clones) a key held by a managed lease is not granted again to another
//!   `acquire`, so two threads sharing a handle never both run `with_lease` for a key.
//!   [`Leases::acquire_waiting`] waits for a held key (as `etcdctl lock` does), woken at once by a
//!   release when the `Db` has handover notifications on
//!   ([`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications)).
//! - **Raw**, thread-free, for tests driven tick by tick and for callers with their own loop:
//!   [`Leases::try_acquire`], [`Leases::renew`] (one statement for a whole batch),
//!   [`Leases::release`]. These are guarded by owner only (a re-acquire by the same owner inside its
//!   raw tenure is idempotent and keeps the token); [`Leases::release_tenure`] also checks the token.
//!   A tenure held by a managed lease is never theirs, not even under the same owner name (this
//!   family, another family, another process): the row marks it ([`LeaseInfo::managed`]), and raw
//!   calls neither re-acquire, renew nor release it by key, so no other handle ever gets its token.
//!   It waits for the lease's release or lapse like any other candidate.
//!
//! Protect each write with [`Lease::fence`] (for a raw tenure, [`Leases::fence`]) inside the
//! write's own transaction: it locks the lease row `FOR SHARE` where key, owner and token match and
//! the lease is live by `clock_timestamp()`, so a takeover waits until that transaction ends and a
//! paused, stale holder can never commit a write after another tenure began. Another driver
//! (Diesel, psql, Python) runs the same fence as a value, [`Lease::fence_statement`]
//! ([`crate::fence`]).
//!
//! # Replication and failover
//!
//! Lease rows live on the primary. Tokens only grow across a promotion of a standby, even one that
//! missed the last writes: new tokens fold in the server's timeline ([`Db::with_timeline_tokens`]).
//! With **synchronous** replication a failover shorter than the TTL keeps every lease, with its
//! token. With **asynchronous** replication the new primary may have lost a holder's last renewals
//! (or its grant) while the holder still believes it holds the key; so after a promotion no lapsed
//! or absent key is granted until one longest TTL has passed ([`Db::with_promotion_hold_off`]), by
//! when every such belief has ended, and the old holder's fence fails. Live leases renew as usual.
//! See `docs/high-availability.md` in the repository.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! # fn export_invoices(_: &mut pgtenure::postgres::Transaction<'_>) -> Result<(), pgtenure::postgres::Error> { Ok(()) }
//! use std::time::Duration;
//! use pgtenure::{Db, leases::Leases};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let leases = Leases::new(&db);
//! leases.create_table()?;
//!
//! let ran = leases.with_lease("invoice-export", Duration::from_secs(30), |lease| {
//!     let mut conn = db.connection().expect("a connection");
//!     let mut tx = conn.transaction()?;
//!     if lease.fence(&mut tx).unwrap_or(false) {
//!         export_invoices(&mut tx)?; // the protected write
//!         tx.commit()?;
//!     }
//!     Ok::<_, pgtenure::postgres::Error>(())
//! })?;
//! if ran.is_none() {
//!     // another instance holds the lease
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Superseding
//!
//! A contender may ask for a live lease with [`Leases::supersede`]: the row is flagged, the holder
//! learns it at its next renewal ([`LeaseLoss::Superseded`] on the loss channel, or
//! [`KeyRenewal::Superseded`] from a raw renewal) and should stop and release. Two holders never hold
//! a key together: the contender acquires only after the release or the lapse.
//!
//! # Operators
//!
//! [`Leases::holder`] reads a key's row (owner, token, until when, and whether it is live by the
//! database clock), [`Leases::list`] every key under a prefix, and [`Leases::force_release`] ends
//! whoever's tenure of a key (its holder learns [`LeaseLoss::Refused`] at its next renewal; its
//! fence fails at once). A refused acquire says why with [`Leases::refusal`] (or
//! [`Leases::acquire_or_refusal`]): a managed lease of this family holds the key, this owner holds
//! it elsewhere, another owner holds it, or nobody does any more. The `pgtenure` command shows these
//! (`pgtenure leases`, `pgtenure lease show KEY`, `pgtenure lease release KEY --force`).
//!
//! # Isolation
//!
//! The statements assume READ COMMITTED ([`Db::connect`](crate::Db::connect) pins it). Under a
//! REPEATABLE READ or SERIALIZABLE default, a contended acquire can fail with
//! [`ErrorKind::Serialization`](crate::ErrorKind::Serialization): it is reported as that error, not
//! retried and not turned into "not acquired", and nothing was granted. Two holders still never hold a
//! key together.

mod family;
mod grant;
mod lease;
mod renewer;
mod sql;
mod state;
mod timing;
mod views;
mod waiting;
mod watcher;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use self::family::WatchedFamily;
pub use self::grant::{Grant, KeyRenewal, Renewal};
pub use self::lease::Lease;
pub(crate) use self::sql::Statements;
pub use self::state::LeaseLoss;
pub use self::timing::MIN_MANAGED_TTL;
pub use self::views::{LeaseInfo, LeaseSummary, Refusal};
pub use self::waiting::DEFAULT_RETRY_PERIOD;
use crate::db::{Db, Policy};
use crate::error::Result;
use crate::fence::Fence;
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::default_owner;
use crate::migrations::Kind;
use crate::observe;
use crate::table_name::TableName;

/// The table [`Leases::new`] uses unless [`Leases::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_leases";

/// Checks a managed lease's key and TTL as [`Leases::acquire`] does, before anything is sent.
fn check_acquire(key: &str, ttl: Duration) -> Result<()> {
    check_key("lease key", key)?;
    micros("managed lease ttl", ttl, MIN_MANAGED_TTL).map(drop)
}

/// Checks an owner name as [`Leases::with_owner`] does.
fn check_owner(owner: &str) -> Result<()> {
    check_key("owner", owner)
}

/// Keyed leases for one owner; see the [module docs](self).
///
/// Cheap to clone (clones share managed-lease bookkeeping and the deadline watcher), `Send` and
/// `Sync`. Configure it (`with_table`, `with_owner`) before use: each setter starts a new family.
#[derive(Clone)]
pub struct Leases {
    shared: Arc<WatchedFamily>,
    /// How often a waiting acquire tries again ([`Leases::with_retry_period`]).
    retry: Duration,
}

/// Whether an acquire by an owner that already holds the key live keeps that tenure's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reacquire {
    /// Raw grants: an idempotent re-acquire keeps the token.
    KeepsToken,
    /// Managed leases: always a new tenure with a new token.
    NewTenure,
}

impl Leases {
    /// Leases in the table `pgtenure_leases`, owned by a fresh owner name
    /// (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> Leases {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        Leases {
            shared: WatchedFamily::new(db.clone(), default_owner().into(), table),
            retry: DEFAULT_RETRY_PERIOD,
        }
    }

    /// Uses another table: `table` or `schema.table`, each part a plain identifier of at most 63
    /// bytes. Defaults to `pgtenure_leases`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(self, table: &str) -> Result<Leases> {
        let table = TableName::parse(table)?;
        let shared = &self.shared;
        Ok(Leases {
            shared: WatchedFamily::new(shared.db.clone(), shared.owner.clone(), table),
            retry: self.retry,
        })
    }

    /// Names the owner. Defaults to `"{hostname}-{pid}-{random hex}"`, distinct for every
    /// `Leases::new`: hostname or pid alone repeat across containers. Two handles with the same owner
    /// are the same holder of raw grants (each can re-acquire, renew, release and fence the other's),
    /// but not of managed leases: a managed lease's tenure is its [`Lease`]'s alone, and the other
    /// handle is another candidate that waits for its release or lapse.
    ///
    /// Because they are one holder, one raw handle's release ends the grant for both without
    /// telling the other: the other handle still takes itself for the holder until the deadline it
    /// computed, while another owner may already be granted the key. Two raw handles of one owner
    /// are one holder only when they act as one (one process, or callers that share what they do);
    /// otherwise give each its own owner, or fence every write.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `owner` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_owner(self, owner: &str) -> Result<Leases> {
        check_owner(owner)?;
        let shared = &self.shared;
        Ok(Leases {
            shared: WatchedFamily::new(shared.db.clone(), owner.into(), shared.sql.table.clone()),
            retry: self.retry,
        })
    }

    /// The owner written into held rows.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Creates the table and its token sequence, or brings them to this version's schema (see
    /// [`crate::migrations`]); a table at this version is left as it is. Every instance may call it
    /// at startup, all at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Schema`](crate::ErrorKind::Schema) when the table was migrated by a newer
    /// pgtenure (nothing is changed; this one's handles still use it) or is recorded as another
    /// kind of pgtenure table; a database or connection error: creating and migrating need
    /// `CREATE` on the schema, which must exist, and ownership of the table.
    pub fn create_table(&self) -> Result<()> {
        self.shared
            .db
            .migrate_table(Kind::Leases, &self.shared.sql.table)
            .map(drop)
    }

    /// Acquires `key` for `ttl` and starts a thread that renews it every `ttl / 3`.
    ///
    /// Returns `None` when another owner holds the key, or when this `Leases` family already holds it
    /// with a managed lease (or is still releasing one). One statement, one round trip; a refused
    /// acquire writes nothing.
    ///
    /// Every managed lease is a tenure of its own with a new token, and it takes only a free or
    /// lapsed row: a live row of this owner (a raw grant, or a lease of another family with the same
    /// owner) is not taken over, so no other lease can share, shorten or end its tenure. If the
    /// connection fails after the acquire was sent, it is sent once more on another connection; if
    /// the first had landed, the second is refused and the grant lapses unused at its TTL.
    ///
    /// The local deadline counts from when the grant was sent on a pooled connection, so waiting for
    /// a connection does not shorten the lease. If the grant's answer arrives after that deadline
    /// (the statement itself waited longer than the TTL), the lease is returned already lost
    /// ([`LeaseLoss::Expired`] on its channel, [`Lease::is_held`] false).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when the key
    /// is blank, contains a NUL byte or is over 1,024 bytes, or `ttl` is under 30 ms or over 100 years.
    /// A database or connection error from the acquire (no lease is returned; if the grant did land,
    /// nobody renews it and it lapses at its TTL), or a [`ErrorKind::Setup`](crate::ErrorKind::Setup)
    /// error when a thread could not be started (the row is released again).
    pub fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        check_acquire(key, ttl)?;
        let ttl_us = micros("managed lease ttl", ttl, MIN_MANAGED_TTL)?;
        if !self.shared.held.lock().insert(key.to_owned()) {
            log::debug!(target: "pgtenure::leases", "lease {key:?} is already held by this Leases family");
            return Ok(None);
        }
        let (token, sent) = match self.acquire_statement(key, ttl_us, Reacquire::NewTenure) {
            Ok(Some((token, _, sent))) => (token, sent),
            Ok(None) => {
                self.shared.forget(key);
                return Ok(None);
            }
            Err(e) => {
                self.shared.forget(key);
                return Err(e);
            }
        };
        match Lease::start(self.shared.clone(), key, token, ttl, ttl_us, sent) {
            Ok(lease) => {
                log::debug!(target: "pgtenure::leases", "acquired lease {key:?} with token {token}");
                Ok(Some(lease))
            }
            Err(e) => {
                if let Err(release) = self.release_tenure(key, token) {
                    log::warn!(target: "pgtenure::leases", "could not release lease {key:?}: {release}");
                }
                self.shared.forget(key);
                Err(e)
            }
        }
    }

    /// Runs `f` while holding `key`, iff the lease can be acquired.
    ///
    /// The lease renews while `f` runs; `f` gets the [`Lease`] to watch for loss
    /// ([`Lease::lost`], [`Lease::is_held`]) and to fence its writes with [`Lease::token`]. The lease
    /// is released when `f` returns, and when it unwinds from a panic. Returns `Ok(Some(value))` when
    /// `f` ran (also when the lease was lost while it ran: `f` saw the loss), `Ok(None)` when the
    /// lease is held elsewhere. A failed release after `f` ran is logged, and the value returned: the
    /// row lapses at its expiry.
    ///
    /// # Errors
    ///
    /// The errors of [`Leases::acquire`], returned instead of running `f` (not logged: the caller
    /// decides).
    pub fn with_lease<T>(
        &self,
        key: &str,
        ttl: Duration,
        f: impl FnOnce(&Lease) -> T,
    ) -> Result<Option<T>> {
        let Some(lease) = self.acquire(key, ttl)? else {
            return Ok(None);
        };
        let value = f(&lease);
        if let Err(e) = lease.release() {
            log::warn!(target: "pgtenure::leases", "with_lease could not release {key:?}: {e}");
        }
        Ok(Some(value))
    }

    /// Acquires `key` for `ttl` without a renewal thread: when no row exists, its lease lapsed, or
    /// this owner holds it (an idempotent re-acquire that keeps the token; it extends the lease and
    /// never shortens it).
    ///
    /// Returns `None` when another owner holds the key, and when a managed lease holds it (of this
    /// family, or of another handle or process with the same owner name): a raw grant never shares
    /// a managed lease's tenure. [`Leases::refusal`] says which.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, for a bad key
    /// or a `ttl` under 1 ms or over 100 years; otherwise a database or connection error. An answer
    /// that cannot be read (a column of the table changed: see
    /// [`ErrorKind::Database`](crate::ErrorKind::Database)) is an error although the grant may have
    /// been stored: it then lapses at its TTL.
    pub fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Grant>> {
        check_key("lease key", key)?;
        let ttl_us = micros("lease ttl", ttl, MIN_DURATION)?;
        let managed = || self.shared.held.lock().contains(key);
        if managed() {
            return Ok(None);
        }
        let granted = self.acquire_statement(key, ttl_us, Reacquire::KeepsToken)?;
        // A managed acquire of this family that began meanwhile may have won the tenure this grant
        // re-acquired: never hand out its token twice.
        if managed() {
            return Ok(None);
        }
        Ok(granted.map(|(token, superseded, sent)| Grant {
            key: key.to_owned(),
            token,
            superseded,
            deadline: sent + ttl,
        }))
    }

    /// The acquire statement: `(token, superseded, sent)` when granted, `sent` being the instant
    /// before the statement that granted it was sent (after the pool checkout).
    fn acquire_statement(
        &self,
        key: &str,
        ttl_us: i64,
        reacquire: Reacquire,
    ) -> Result<Option<(i64, bool, Instant)>> {
        let keep = reacquire == Reacquire::KeepsToken;
        let (db, sql, owner) = (&self.shared.db, &self.shared.sql, &self.shared.owner);
        sql.check_schema(db)?;
        let answered = db.grant(&sql.promotion, ttl_us, |promotion| {
            sql.acquire(db, key, owner, ttl_us, keep, promotion)
        });
        self.shared.note(&answered);
        let (answer, sent) = answered?;
        observe::lease_acquire(answer.granted.is_some());
        Ok(answer
            .granted
            .map(|(token, superseded)| (token, superseded, sent)))
    }

    /// Renews this owner's live leases among `keys` for `ttl`, in one statement for the whole batch.
    ///
    /// Each key is [`KeyRenewal::Held`], [`KeyRenewal::Superseded`] (still held) or
    /// [`KeyRenewal::Lost`]. A lapsed lease is lost even if nobody took it: its holder's local
    /// deadline has passed. A key a managed lease holds is [`KeyRenewal::Lost`] here even under this
    /// owner name (its lease renews it; a raw batch never adopts it). An empty batch sends nothing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when any key
    /// is bad (the whole batch is refused) or `ttl` is out of range; otherwise a database or
    /// connection error (nothing is known renewed then).
    pub fn renew(&self, keys: &[&str], ttl: Duration) -> Result<Renewal> {
        for key in keys {
            check_key("lease key", key)?;
        }
        let ttl_us = micros("lease ttl", ttl, MIN_DURATION)?;
        // Distinct keys in the order given, and the answers by key: linear in the batch size.
        let mut seen: HashSet<&str> = HashSet::with_capacity(keys.len());
        let distinct: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|key| seen.insert(key))
            .collect();
        if distinct.is_empty() {
            return Ok(Renewal::default());
        }
        let sent = Instant::now();
        let rows = self
            .shared
            .sql
            .renew(&self.shared.db, &distinct, &self.shared.owner, ttl_us)
            .inspect_err(|_| observe::lease_renewal("failed", None))?;
        let mut renewed: HashMap<String, KeyRenewal> = HashMap::with_capacity(rows.len());
        for (key, token, superseded) in rows {
            let outcome = if superseded {
                KeyRenewal::Superseded { token }
            } else {
                KeyRenewal::Held { token }
            };
            renewed.insert(key, outcome);
        }
        let outcomes = distinct
            .iter()
            .map(|key| {
                (
                    (*key).to_owned(),
                    renewed.get(*key).copied().unwrap_or(KeyRenewal::Lost),
                )
            })
            .inspect(|(_, outcome)| {
                observe::lease_renewal(
                    match outcome {
                        KeyRenewal::Held { .. } => "renewed",
                        KeyRenewal::Superseded { .. } => "superseded",
                        KeyRenewal::Lost => "refused",
                    },
                    None,
                );
            })
            .collect();
        Ok(Renewal {
            outcomes,
            deadline: Some(sent + ttl),
        })
    }

    /// Releases this owner's live lease on `key` (guarded by owner): `true` when one was released.
    /// At most once a minute per family it also deletes rows whose lease lapsed over an hour ago.
    ///
    /// `false`, releasing nothing, when a managed lease holds the key, even under this owner name
    /// (this family's, another family's or another process's): ending it by name would take its
    /// tenure from the [`Lease`] that won it. That lease releases it ([`Lease::release`], or
    /// dropping it); an operator ends it with [`Leases::force_release`] (`pgtenure lease release
    /// KEY --force`), and its holder learns [`LeaseLoss::Refused`].
    ///
    /// A release whose outcome is unknown may still run after this owner acquired the key again,
    /// and end that grant: see [`Leases::release_tenure`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error.
    pub fn release(&self, key: &str) -> Result<bool> {
        self.release_guarded(key, None)
    }

    /// Like [`Leases::release`], guarded by owner and token: it never frees a newer tenure of the
    /// same owner. The token names the tenure, so this also ends a managed lease's tenure whose
    /// token it is given (that lease learns [`LeaseLoss::Refused`]).
    ///
    /// A raw re-acquire by the same owner keeps the token, so a release whose outcome is unknown
    /// (the connection was lost after sending it: [`Error::is_outcome_unknown`](crate::Error::is_outcome_unknown))
    /// may still run after such a re-acquire and end the grant the caller then believes. After an
    /// unknown outcome, do not acquire the key again raw until its lease has lapsed (its TTL after
    /// the release was sent), or use a managed lease; the model checker found this interleaving
    /// (docs/reliability.md, "Model checking"). Managed leases draw a new token per tenure and are
    /// not affected.
    ///
    /// # Errors
    ///
    /// As [`Leases::release`].
    pub fn release_tenure(&self, key: &str, token: i64) -> Result<bool> {
        self.release_guarded(key, Some(token))
    }

    fn release_guarded(&self, key: &str, token: Option<i64>) -> Result<bool> {
        check_key("lease key", key)?;
        self.shared
            .db
            .with_conn("release lease", Policy::ONCE, |conn| {
                let shared = &self.shared;
                let sweep = shared.sweep_due();
                shared
                    .sql
                    .release(&shared.db, conn, sweep, key, &shared.owner, token)
            })
            .and_then(|released| released)
    }

    /// Asks the holder of a live lease on `key` to give it up: `true` when a live lease is now
    /// flagged, `false` when there is none. The holder learns it at its next renewal.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error.
    pub fn supersede(&self, key: &str) -> Result<bool> {
        check_key("lease key", key)?;
        self.shared.sql.supersede(&self.shared.db, key)
    }

    /// Checks, inside the caller's transaction, that this owner's tenure `token` of `key` is live by
    /// `clock_timestamp()`, and locks the lease row `FOR SHARE` until the transaction ends, so no
    /// takeover can commit before it. Write only when it returns `true`. A convenience for a raw
    /// tenure ([`Grant`]); a managed lease fences itself ([`Lease::fence`]).
    ///
    /// The lock also makes renewals of the lease wait until the transaction ends: keep fenced
    /// transactions well inside the lease's slack (a third of the TTL).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>, key: &str, token: i64) -> Result<bool> {
        self.fence_statement(key, token)?.check(tx)
    }

    /// The fence of this owner's tenure `token` of `key` as a value, for another driver or
    /// process to run inside its own transaction ([`crate::fence`]); [`Leases::fence`] runs it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key.
    pub fn fence_statement(&self, key: &str, token: i64) -> Result<Fence> {
        check_key("lease key", key)?;
        Ok(self.shared.sql.fence(key, &self.shared.owner, token))
    }
}

impl fmt::Debug for Leases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leases")
            .field("table", &self.shared.sql.table)
            .field("owner", &self.shared.owner)
            .field("managed_held", &self.shared.held.lock().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_without_a_database_are_acquires_own() {
        assert!(check_acquire("k", MIN_MANAGED_TTL).is_ok());
        assert!(check_acquire("k", crate::input::MAX_DURATION).is_ok());
        for (key, ttl) in [
            ("", Duration::from_secs(1)),
            (" \t", Duration::from_secs(1)),
            ("a\0b", Duration::from_secs(1)),
            ("k", Duration::from_millis(29)),
            ("k", crate::input::MAX_DURATION + Duration::from_secs(1)),
        ] {
            let err = check_acquire(key, ttl).unwrap_err();
            assert!(err.is_invalid_input(), "{key:?} {ttl:?}: {err}");
        }
        assert!(check_acquire(&"k".repeat(1025), Duration::from_secs(1)).is_err());
        let err = check_acquire("k", Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains("at least 30ms"), "{err}");
        assert!(check_owner("host-a").is_ok());
        assert!(check_owner(" ").unwrap_err().is_invalid_input());
    }
}
