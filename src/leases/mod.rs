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
//! - **Raw**, thread-free, for tests driven tick by tick and for callers with their own loop:
//!   [`Leases::try_acquire`], [`Leases::renew`] (one statement for a whole batch),
//!   [`Leases::release`]. These are guarded by owner only (a re-acquire by the same owner inside its
//!   tenure is idempotent and keeps the token); [`Leases::release_tenure`] also checks the token.
//!
//! Protect each write with [`Leases::fence`] inside the write's own transaction: it locks the lease
//! row `FOR SHARE` where key, owner and token match and the lease is live by `clock_timestamp()`, so
//! a takeover waits until that transaction ends and a paused, stale holder can never commit a write
//! after another tenure began.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! # fn export_invoices(_: &mut pgtenure::postgres::Transaction<'_>) -> Result<(), pgtenure::postgres::Error> { Ok(()) }
//! use std::time::Duration;
//! use pgtenure::{Db, Leases};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let leases = Leases::new(&db);
//! leases.create_table()?;
//!
//! let ran = leases.with_lease("invoice-export", Duration::from_secs(30), |lease| {
//!     let mut conn = db.pool().get().expect("a connection");
//!     let mut tx = conn.transaction()?;
//!     if leases.fence(&mut tx, lease.key(), lease.token()).unwrap_or(false) {
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
//! learns it at its next renewal ([`LossReason::Superseded`] on the loss channel, or
//! [`KeyRenewal::Superseded`] from a raw renewal) and should stop and release. Two holders never hold
//! a key together: the contender acquires only after the release or the lapse.
//!
//! # Isolation
//!
//! The statements assume READ COMMITTED ([`Db::connect`](crate::Db::connect) pins it). Under a
//! REPEATABLE READ or SERIALIZABLE default, a contended acquire can fail with
//! [`ErrorKind::Serialization`](crate::ErrorKind::Serialization): it is reported as that error, not
//! retried and not turned into "not acquired", and nothing was granted. Two holders still never hold a
//! key together.

mod lease;
mod schedule;
mod watcher;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use postgres::types::Type;

pub use self::lease::{Lease, LossReason};
use self::schedule::MIN_MANAGED_TTL;
use self::watcher::{Watch, Watcher};
use crate::db::{Companion, Conn, Db, Policy};
use crate::error::{Error, Result};
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::default_owner;
use crate::statement::{Failure, Statement};
use crate::table_name::{render, TableName};

/// The table [`Leases::new`] uses unless [`Leases::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_leases";

/// How often [`Leases::release`] also deletes rows that lapsed over an hour ago (a table scan).
const SWEEP_EVERY: Duration = Duration::from_secs(60);

const CREATE_SEQUENCE: &str = include_str!("../../sql/leases/create_sequence.sql");
const CREATE_TABLE: &str = include_str!("../../sql/leases/create_table.sql");
const ACQUIRE: &str = include_str!("../../sql/leases/acquire.sql");
const RENEW: &str = include_str!("../../sql/leases/renew.sql");
const RENEW_TENURE: &str = include_str!("../../sql/leases/renew_tenure.sql");
const RELEASE: &str = include_str!("../../sql/leases/release.sql");
const RELEASE_AND_SWEEP: &str = include_str!("../../sql/leases/release_and_sweep.sql");
const SUPERSEDE: &str = include_str!("../../sql/leases/supersede.sql");
const FENCE: &str = include_str!("../../sql/leases/fence.sql");

pub(crate) struct Statements {
    table: TableName,
    create: [String; 2],
    acquire: Statement,
    renew: Statement,
    renew_tenure: Statement,
    release: Statement,
    release_and_sweep: Statement,
    supersede: Statement,
    /// Sent unprepared: it runs inside the caller's transaction, where a missing prepared
    /// statement would abort it.
    fence: String,
}

impl Statements {
    fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            create: [
                render(CREATE_SEQUENCE, &table),
                render(CREATE_TABLE, &table),
            ],
            acquire: Statement::new(
                render(ACQUIRE, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8, Type::BOOL],
            ),
            renew: Statement::new(
                render(RENEW, &table),
                &[Type::TEXT_ARRAY, Type::TEXT, Type::INT8],
            ),
            renew_tenure: Statement::new(
                render(RENEW_TENURE, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8, Type::INT8],
            ),
            release: Statement::new(
                render(RELEASE, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8],
            ),
            release_and_sweep: Statement::new(
                render(RELEASE_AND_SWEEP, &table),
                &[Type::TEXT, Type::TEXT, Type::INT8],
            ),
            supersede: Statement::new(render(SUPERSEDE, &table), &[Type::TEXT]),
            fence: render(FENCE, &table),
            table,
        })
    }
}

/// What a `Leases` family and its renewal threads share: the pool, the owner, the statements, the
/// keys its managed leases hold, and whether its last pool checkout failed. Renewal threads hold this
/// and not [`Shared`], so they never keep the deadline watcher alive.
pub(crate) struct Family {
    db: Db,
    owner: Arc<str>,
    sql: Arc<Statements>,
    /// Keys held by managed leases of this family. A key leaves the set only once its lease's
    /// release has completed (or was never needed), so a second acquire in the family can never
    /// adopt a tenure whose release is still on its way.
    held: Mutex<HashSet<String>>,
    /// When a pool checkout of this family last timed out, cleared by the next statement that ran:
    /// while set, releasing and dropping leases wait no later than a short while after it, so
    /// dropping many leases during an outage costs one short wait in all, not one each.
    outage: Mutex<Option<Instant>>,
    last_sweep: Mutex<Option<Instant>>,
}

impl Family {
    /// Forgets a managed lease of this family, once its release completed.
    fn forget(&self, key: &str) {
        self.held.lock().remove(key);
    }

    /// Notes how a statement of this family went: a pool checkout that timed out starts an outage,
    /// anything that reached the database ends it.
    fn note<T>(&self, result: &Result<T>) {
        match result {
            Ok(_) => *self.outage.lock() = None,
            Err(e) if e.is_pool_checkout() => {
                self.outage.lock().get_or_insert_with(Instant::now);
            }
            Err(_) => {}
        }
    }

    /// Since when the family's pool checkouts time out, if the last one did and nothing ran since.
    fn outage_since(&self) -> Option<Instant> {
        *self.outage.lock()
    }

    /// Whether this release should also sweep long-lapsed rows (at most once a minute per family).
    fn sweep_due(&self) -> bool {
        let mut last = self.last_sweep.lock();
        match *last {
            Some(at) if at.elapsed() < SWEEP_EVERY => false,
            _ => {
                *last = Some(Instant::now());
                true
            }
        }
    }

    /// The release statement for this release: once a minute, the one that also sweeps.
    fn release_statement(&self) -> &Statement {
        if self.sweep_due() {
            &self.sql.release_and_sweep
        } else {
            &self.sql.release
        }
    }

    /// Runs `statement` (from [`Family::release_statement`]) on `conn`: whether a live lease was
    /// released.
    fn release_with(
        &self,
        conn: &mut Conn,
        statement: &Statement,
        key: &str,
        token: Option<i64>,
    ) -> std::result::Result<bool, Failure> {
        let rows = self
            .db
            .run(conn, statement, &[&key, &&*self.owner, &token])?;
        // A SELECT without FROM: always exactly one row.
        let Some(row) = rows.first() else {
            return Ok(false);
        };
        let swept: i64 = row.get("swept");
        if swept > 0 {
            log::info!(target: "pgtenure::leases", "deleted {swept} lease rows that lapsed over an hour ago");
        }
        Ok(row.get("released"))
    }
}

/// What a `Leases` handle and its clones share: the family and the deadline watcher (started with the
/// first managed lease, stopped when the last handle and lease are dropped).
pub(crate) struct Shared {
    family: Arc<Family>,
    watcher: Mutex<Option<Watcher>>,
}

impl std::ops::Deref for Shared {
    type Target = Family;

    fn deref(&self) -> &Family {
        &self.family
    }
}

impl Shared {
    fn new(db: Db, owner: Arc<str>, table: TableName) -> Arc<Shared> {
        Arc::new(Shared {
            family: Arc::new(Family {
                db,
                owner,
                sql: Statements::new(table),
                held: Mutex::new(HashSet::new()),
                outage: Mutex::new(None),
                last_sweep: Mutex::new(None),
            }),
            watcher: Mutex::new(None),
        })
    }

    fn watch(&self, watch: Watch) -> Result<()> {
        let mut watcher = self.watcher.lock();
        if watcher.is_none() {
            *watcher = Some(Watcher::start()?);
        }
        watcher.as_ref().expect("started above").send(watch);
        Ok(())
    }
}

/// Keyed leases for one owner; see the [module docs](self).
///
/// Cheap to clone (clones share managed-lease bookkeeping and the deadline watcher), `Send` and
/// `Sync`. Configure it (`with_table`, `with_owner`) before use: each setter starts a new family.
#[derive(Clone)]
pub struct Leases {
    shared: Arc<Shared>,
}

/// A raw grant from [`Leases::try_acquire`]: no thread renews it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    key: String,
    token: i64,
    superseded: bool,
    deadline: Instant,
}

impl Grant {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The tenure's fencing token.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Whether a contender has asked for the key (only on a re-acquire inside a flagged tenure).
    pub fn is_superseded(&self) -> bool {
        self.superseded
    }

    /// The local deadline: the instant before the grant was sent, plus the TTL.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// One key's outcome in a [`Renewal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRenewal {
    /// Renewed.
    Held {
        /// The tenure's token.
        token: i64,
    },
    /// Renewed, but a contender asked for it: stop and release.
    Superseded {
        /// The tenure's token.
        token: i64,
    },
    /// Not renewed: taken, released, deleted or lapsed.
    Lost,
}

/// The outcome of a batch [`Leases::renew`], one entry per distinct key, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    outcomes: Vec<(String, KeyRenewal)>,
    deadline: Option<Instant>,
}

impl Renewal {
    /// The outcome for `key`, if it was in the batch.
    pub fn get(&self, key: &str) -> Option<KeyRenewal> {
        self.outcomes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, o)| *o)
    }

    /// Every key with its outcome.
    pub fn iter(&self) -> impl Iterator<Item = (&str, KeyRenewal)> + '_ {
        self.outcomes.iter().map(|(k, o)| (k.as_str(), *o))
    }

    /// The keys still held (superseded ones included: they are still held).
    pub fn held(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| *o != KeyRenewal::Lost)
            .map(|(k, _)| k)
    }

    /// The keys held but asked for by a contender.
    pub fn superseded(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| matches!(o, KeyRenewal::Superseded { .. }))
            .map(|(k, _)| k)
    }

    /// The keys lost.
    pub fn lost(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| *o == KeyRenewal::Lost)
            .map(|(k, _)| k)
    }

    /// The new local deadline of the renewed keys (the instant before the renewal was sent, plus the
    /// TTL); `None` for an empty batch.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

/// Whether an acquire by an owner that already holds the key live keeps that tenure's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tenure {
    /// Raw grants: an idempotent re-acquire keeps the token.
    Keep,
    /// Managed leases: always a new tenure with a new token.
    New,
}

impl Leases {
    /// Leases in the table `pgtenure_leases`, owned by a fresh owner name
    /// (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> Leases {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        Leases {
            shared: Shared::new(db.clone(), default_owner().into(), table),
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
            shared: Shared::new(shared.db.clone(), shared.owner.clone(), table),
        })
    }

    /// Names the owner. Defaults to `"{hostname}-{pid}-{random hex}"`, distinct for every
    /// `Leases::new`: hostname or pid alone repeat across containers. Two handles with the same owner
    /// are the same holder to the database (each can renew, release and fence the other's raw
    /// grants; managed leases also check the token).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `owner` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_owner(self, owner: &str) -> Result<Leases> {
        check_key("owner", owner)?;
        let shared = &self.shared;
        Ok(Leases {
            shared: Shared::new(shared.db.clone(), owner.into(), shared.sql.table.clone()),
        })
    }

    /// The owner written into held rows.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Creates the table and its token sequence unless the table exists. Every instance may call it
    /// at startup, all at once.
    ///
    /// # Errors
    ///
    /// A database or connection error; creating needs `CREATE` on the schema, which must exist.
    pub fn create_table(&self) -> Result<()> {
        let sql = &self.shared.sql;
        self.shared.db.create_table(
            "create leases table",
            &sql.table,
            &sql.create,
            &[Companion::sequence(sql.table.derived("token_seq"))],
        )
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
    /// ([`LossReason::Expired`] on its channel, [`Lease::is_held`] false).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when the key
    /// is blank, contains a NUL byte or is over 1,024 bytes, or `ttl` is under 30 ms or over 100 years.
    /// A database or connection error from the acquire (no lease is returned; if the grant did land,
    /// nobody renews it and it lapses at its TTL), or a [`ErrorKind::Setup`](crate::ErrorKind::Setup)
    /// error when a thread could not be started (the row is released again).
    pub fn acquire(&self, key: &str, ttl: Duration) -> Result<Option<Lease>> {
        check_key("lease key", key)?;
        let ttl_us = micros("managed lease ttl", ttl, MIN_MANAGED_TTL)?;
        if !self.shared.held.lock().insert(key.to_owned()) {
            log::debug!(target: "pgtenure::leases", "lease {key:?} is already held by this Leases family");
            return Ok(None);
        }
        let (token, sent) = match self.acquire_statement(key, ttl_us, Tenure::New) {
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
    /// Returns `None` when another owner holds the key, and when a managed lease of this `Leases`
    /// family holds it: a raw grant never shares a managed lease's tenure.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, for a bad key
    /// or a `ttl` under 1 ms or over 100 years; otherwise a database or connection error.
    pub fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Option<Grant>> {
        check_key("lease key", key)?;
        let ttl_us = micros("lease ttl", ttl, MIN_DURATION)?;
        let managed = || self.shared.held.lock().contains(key);
        if managed() {
            return Ok(None);
        }
        let granted = self.acquire_statement(key, ttl_us, Tenure::Keep)?;
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
        tenure: Tenure,
    ) -> Result<Option<(i64, bool, Instant)>> {
        let keep = tenure == Tenure::Keep;
        let mut sent = Instant::now();
        let rows = self
            .shared
            .db
            .with_conn("acquire lease", Policy::IDEMPOTENT, |conn| {
                sent = Instant::now();
                self.shared.db.run(
                    conn,
                    &self.shared.sql.acquire,
                    &[&key, &&*self.shared.owner, &ttl_us, &keep],
                )
            });
        self.shared.note(&rows);
        Ok(rows?
            .first()
            .map(|row| (row.get("token"), row.get("superseded"), sent)))
    }

    /// Renews this owner's live leases among `keys` for `ttl`, in one statement for the whole batch.
    ///
    /// Each key is [`KeyRenewal::Held`], [`KeyRenewal::Superseded`] (still held) or
    /// [`KeyRenewal::Lost`]. A lapsed lease is lost even if nobody took it: its holder's local
    /// deadline has passed. An empty batch sends nothing.
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
        let rows = self.shared.db.query(
            "renew leases",
            Policy::IDEMPOTENT,
            &self.shared.sql.renew,
            &[&distinct, &&*self.shared.owner, &ttl_us],
        )?;
        let mut renewed: HashMap<&str, KeyRenewal> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let token = row.get("token");
            let outcome = if row.get("superseded") {
                KeyRenewal::Superseded { token }
            } else {
                KeyRenewal::Held { token }
            };
            renewed.insert(row.get("key"), outcome);
        }
        let outcomes = distinct
            .iter()
            .map(|key| {
                (
                    (*key).to_owned(),
                    renewed.get(key).copied().unwrap_or(KeyRenewal::Lost),
                )
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
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error.
    pub fn release(&self, key: &str) -> Result<bool> {
        self.release_guarded(key, None)
    }

    /// Like [`Leases::release`], guarded by owner and token: it never frees a newer tenure of the
    /// same owner.
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
                let statement = self.shared.release_statement();
                self.shared.release_with(conn, statement, key, token)
            })
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
        let row = self.shared.db.query_one(
            "supersede lease",
            Policy::IDEMPOTENT,
            &self.shared.sql.supersede,
            &[&key],
        )?;
        Ok(row.get(0))
    }

    /// Checks, inside the caller's transaction, that this owner's tenure `token` of `key` is live by
    /// `clock_timestamp()`, and locks the lease row `FOR SHARE` until the transaction ends, so no
    /// takeover can commit before it. Write only when it returns `true`.
    ///
    /// The lock also makes renewals of the lease wait until the transaction ends: keep fenced
    /// transactions well inside the lease's slack (a third of the TTL).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>, key: &str, token: i64) -> Result<bool> {
        check_key("lease key", key)?;
        let rows = tx
            .query_typed(
                &self.shared.sql.fence,
                &[
                    (&key, Type::TEXT),
                    (&&*self.shared.owner, Type::TEXT),
                    (&token, Type::INT8),
                ],
            )
            .map_err(|e| Error::from_postgres("fence", e))?;
        Ok(!rows.is_empty())
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
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Leases>();
        check::<Lease>();
        check::<Grant>();
        check::<Renewal>();
    }

    #[test]
    fn the_sequence_is_named_after_the_table_in_its_schema() {
        let sql = Statements::new(TableName::parse("ops.locks").unwrap());
        assert!(sql.create[0].contains("\"ops\".\"locks_token_seq\""));
        assert!(sql
            .acquire
            .text()
            .contains("nextval('\"ops\".\"locks_token_seq\"')"));
    }

    #[test]
    fn renewal_reports_each_key() {
        let r = Renewal {
            outcomes: vec![
                ("a".into(), KeyRenewal::Held { token: 1 }),
                ("b".into(), KeyRenewal::Superseded { token: 2 }),
                ("c".into(), KeyRenewal::Lost),
            ],
            deadline: None,
        };
        assert_eq!(r.held().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(r.superseded().collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.lost().collect::<Vec<_>>(), ["c"]);
        assert_eq!(r.get("b"), Some(KeyRenewal::Superseded { token: 2 }));
        assert_eq!(r.get("z"), None);
    }
}
