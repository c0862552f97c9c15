//! Leader election: a blocking `is_leader` that renews, and a campaign loop with events.
//!
//! Every instance of a fleet polls [`Elector::is_leader`] (say every few seconds, well inside the TTL).
//! Each poll is one statement that renews the leadership when this instance holds it, or takes it
//! when it is free or expired by the database clock. No background thread, nothing to close.
//!
//! Beyond taking and renewing the leadership:
//!
//! - [`Elector::term`]: the current tenure's term, a fencing token that strictly increases across
//!   tenures (drawn from a sequence); [`Elector::fence`] (and a campaign's [`Leadership::fence`])
//!   checks it inside a leader-only write's transaction, and [`Elector::fence_statement`] gives
//!   that fence as a value for another driver ([`crate::fence`]);
//! - a local deadline: `is_leader` never answers `true` past the tenure's local deadline, taken
//!   before the renewal was sent, so it never falls after the database's expiry;
//! - [`Elector::resign`]: give up at once, so that the next poll elsewhere wins without waiting for
//!   the TTL;
//! - [`Elector::leader`]: who leads, since when and until when, for operators;
//! - [`Elector::request_resign`]: ask the live leader to step down at its next renewal;
//! - [`Elector::campaign`]: the poll as a loop on a thread of its own, with events ([`Leadership`]).
//!
//! Polling by hand suits a loop of your own; `campaign` is that loop, written once: it tells when
//! this instance is elected and when it loses (and why), and who leads.
//!
//! Several fleets share one table: each is a row, named with [`Elector::with_name`].
//!
//! Across a failover to a standby, terms only grow (they fold in the server's timeline,
//! [`Db::with_timeline_tokens`](crate::Db::with_timeline_tokens)). With synchronous replication a
//! failover shorter than the TTL keeps the leader and its term. With asynchronous replication the
//! new primary may have lost the leader's last renewals while it still believes it leads; so after a
//! promotion nobody is elected to a lapsed or absent leadership until one longest TTL has passed
//! ([`Db::with_promotion_hold_off`](crate::Db::with_promotion_hold_off)), by when that belief has
//! ended, and term-fenced writes of the old term are refused.
//!
//! An outage (or failover) longer than the TTL, during which every member stayed healthy, keeps the
//! leader: a campaign whose statements failed for want of the database and that did not lead only
//! observes for one retry period after its first answer, while the leader re-takes its lapsed
//! tenure (under a new term) at its first poll; a campaign that saw no failure (the leader really
//! crashed) takes over at expiry as before. Measured with three members (TTL 2 s, a 6 s outage,
//! three trials): the leader changed in 0 of 3 trials (2 of 3 before). Keep the retry period above
//! the pool's reconnect back-off (500 ms): the leader must reach the database within it. Its poll
//! waits for a pool connection until its next turn at most, so it never waits out an outage and
//! then wins what lapsed during it. Plain [`Elector::is_leader`] calls have no such rule: a loop of
//! your own takes a lapsed leadership at its first poll (see docs/high-availability.md).
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use pgtenure::{Db, elector::Elector};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let elector = Elector::new(&db).with_name("billing")?;
//! elector.create_table()?;
//! if elector.is_leader()? {
//!     // lead, until the next poll (at the latest until the tenure's local deadline)
//! }
//! elector.resign()?; // at shutdown: hand over without waiting for the TTL
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::sql::Statements;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::default_owner;
use crate::migrations::Kind;
use crate::table_name::TableName;

/// The table [`Elector::new`] uses unless [`Elector::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_leader";

/// The fleet name [`Elector::new`] uses unless [`Elector::with_name`] names another.
pub const DEFAULT_NAME: &str = "default";

/// The leadership TTL unless [`Elector::with_ttl`] says otherwise. Failover can take one TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

mod campaign;
mod campaigner;
mod events;
mod poll;
mod resign;
mod sql;
mod views;

pub use self::campaign::Leadership;
pub use self::events::{LeaderEvent, LeaderHooks, LeaderLoss, NoLeaderHooks, EVENTS_CAPACITY};
pub use self::views::LeaderInfo;

/// A campaign running on an elector's tenure ([`Elector::campaign`]): [`Elector::resign`] on that
/// elector, or a clone, goes through it, so the campaign stops believing and tells its `Lost`
/// before the resignation frees the row.
trait Campaigning: Send + Sync {
    /// Stops believing, tells the loss, then resigns.
    fn resign(&self) -> Result<()>;
}

/// The campaign (if any) on a tenure; weak, so a campaign that ended is simply gone.
#[derive(Default)]
struct CampaignLink(Option<Weak<dyn Campaigning>>);

impl fmt::Debug for CampaignLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// What an elector knows of its tenure (shared by its clones).
#[derive(Debug, Default)]
struct KnownTenure {
    /// The term this elector won and has not seen end: its renewals and its resignation are guarded
    /// by it. Kept through a failed poll (the tenure may still be live).
    term: Option<i64>,
    /// Until when it leads by its last successful poll; `None` after a failed poll.
    deadline: Option<Instant>,
    /// The newest term it won, kept after the tenure ended: after a promotion it makes this
    /// elector the last holder that a lapsed leadership waits for (is_leader.sql `prefer`), also
    /// when the promoted standby never received that tenure and its row names an older holder.
    last: Option<i64>,
    /// A term this elector stopped believing in (it resigned, or was asked to step down) and has
    /// not yet seen resigned: kept until a resignation of it succeeds, so a failed one can be sent
    /// again. Never renewed: polls are guarded by `term`, which no longer names it.
    resigning: Option<i64>,
    /// Bumped by every `resign`, so a poll that was in flight meanwhile (on a clone) does not bring
    /// the resigned tenure back.
    resigned: u64,
    /// The campaign running on this tenure, if any.
    campaign: CampaignLink,
}

impl KnownTenure {
    /// The term while leading at `now`.
    fn leading(&self, now: Instant) -> Option<i64> {
        self.term
            .filter(|_| self.deadline.is_some_and(|deadline| now < deadline))
    }
}

/// Elects one leader per fleet; see the [module docs](self).
///
/// Cheap to clone (clones share the cached tenure), `Send` and `Sync`.
#[derive(Clone)]
pub struct Elector {
    db: Db,
    name: Arc<str>,
    holder: Arc<str>,
    ttl: Duration,
    ttl_us: i64,
    /// How often `campaign` polls; `None`: a third of the TTL. Always below the TTL.
    retry: Option<Duration>,
    /// What a campaign tells of its events besides its channel ([`Elector::with_hooks`]).
    hooks: Arc<dyn LeaderHooks>,
    sql: Arc<Statements>,
    tenure: Arc<Mutex<KnownTenure>>,
}

impl Elector {
    /// An elector for the fleet `"default"` in the table `pgtenure_leader`, with a 30 s TTL and a
    /// fresh holder name (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> Elector {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        Elector {
            db: db.clone(),
            name: DEFAULT_NAME.into(),
            holder: default_owner().into(),
            ttl: DEFAULT_TTL,
            ttl_us: micros("leader ttl", DEFAULT_TTL, MIN_DURATION)
                .expect("the default TTL is valid"),
            retry: None,
            hooks: Arc::new(NoLeaderHooks),
            sql: Statements::new(table),
            tenure: Arc::default(),
        }
    }

    /// Uses another table: `table` or `schema.table`, each part a plain identifier of at most 63
    /// bytes. Defaults to `pgtenure_leader`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(mut self, table: &str) -> Result<Elector> {
        self.sql = Statements::new(TableName::parse(table)?);
        self.tenure = Arc::default();
        Ok(self)
    }

    /// Names the fleet; several fleets share one table. Defaults to `"default"`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `name` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_name(mut self, name: &str) -> Result<Elector> {
        check_key("fleet name", name)?;
        self.name = name.into();
        self.tenure = Arc::default();
        Ok(self)
    }

    /// How long a tenure lasts without a poll; poll well inside it (a third, say). Failover after a
    /// crash takes up to one TTL. Defaults to 30 s.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `ttl` is under 1 ms or over
    /// 100 years. That it is above the retry period is checked by [`Elector::campaign`], so the
    /// two setters can come in either order.
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Elector> {
        self.ttl_us = micros("leader ttl", ttl, MIN_DURATION)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// How often [`Elector::campaign`]'s thread polls (and so renews while leading); it must be
    /// below the TTL, which [`Elector::campaign`] checks (a leader would lose its tenure between
    /// polls), so this and [`Elector::with_ttl`] can come in either order. Defaults to a third of
    /// the TTL.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `period` is under 1 ms or
    /// over 100 years.
    pub fn with_retry_period(mut self, period: Duration) -> Result<Elector> {
        micros("retry period", period, MIN_DURATION)?;
        self.retry = Some(period);
        Ok(self)
    }

    /// Calls `hooks` for every event of a campaign ([`Elector::campaign`]), in the order of its
    /// events channel, on the campaign's delivering thread. Defaults to [`NoLeaderHooks`].
    pub fn with_hooks(mut self, hooks: Arc<dyn LeaderHooks>) -> Elector {
        self.hooks = hooks;
        self
    }

    /// The retry period [`Elector::campaign`] polls at.
    pub fn retry_period(&self) -> Duration {
        self.retry.unwrap_or(self.ttl / 3)
    }

    /// Names this instance. Defaults to `"{hostname}-{pid}-{random hex}"`, distinct for every
    /// `Elector::new`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `holder` is blank, contains a
    /// NUL byte or is longer than 1,024 bytes.
    pub fn with_holder(mut self, holder: &str) -> Result<Elector> {
        check_key("holder", holder)?;
        self.holder = holder.into();
        self.tenure = Arc::default();
        Ok(self)
    }

    /// This instance's holder name.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fleet's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The leadership TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Creates the table and its term sequence, or brings them to this version's schema (see
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
        self.db
            .migrate_table(Kind::Elector, &self.sql.table)
            .map(drop)
    }
}

impl Elector {
    /// Checks, inside the caller's transaction, that this instance's tenure `term` is live by
    /// `clock_timestamp()`, and locks the row `FOR SHARE` until the transaction ends, so no new
    /// election can commit before it. Make a leader-only write only when it returns `true`.
    ///
    /// The lock also makes this elector's renewal (its next `is_leader`) wait until the transaction
    /// ends: keep such transactions well inside the TTL.
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>, term: i64) -> Result<bool> {
        self.fence_statement(term).check(tx)
    }

    /// The fence of this instance's tenure `term` as a value: the statement and its parameters
    /// (fleet name, holder, term), for any driver to run inside its own transaction
    /// ([`crate::fence`]). [`Elector::fence`] runs it; a campaign gives its current term's with
    /// [`Leadership::fence_statement`].
    pub fn fence_statement(&self, term: i64) -> Fence {
        self.sql.fence(&self.name, &self.holder, term)
    }
}

/// Refuses a retry period that is not below the TTL: the one rule between two of an elector's
/// settings, checked where a campaign starts.
fn check_retry(retry: Option<Duration>, ttl: Duration) -> Result<()> {
    match retry {
        Some(retry) if retry >= ttl => Err(Error::invalid_input(format!(
            "retry period {retry:?} (with_retry_period) is not below the TTL {ttl:?} (with_ttl): a \
             leader would lose its tenure between polls; set a retry period below the TTL (a third \
             of it by default)"
        ))),
        _ => Ok(()),
    }
}

impl fmt::Debug for Elector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elector")
            .field("table", &self.sql.table)
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("retry_period", &self.retry_period())
            .field("term", &self.term())
            .finish()
    }
}
