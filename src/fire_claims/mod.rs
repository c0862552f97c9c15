//! Fire claims: one claim per fire key, held for a TTL.
//!
//! Where [`TickClaims`](crate::tick_claims::TickClaims) keep one row per job, fire claims keep one row per *fire*:
//! a scheduler that computes a fire key for each occurrence of a job (the convention is
//! `"<job>@<unix-nanos>"`, the job's name and the scheduled instant) calls [`FireClaims::claim`] on
//! every instance; exactly one gets `true` and runs that fire. The claim is reserved for the TTL
//! (10 minutes by default), which must cover the largest expected jitter, clock skew and catch-up
//! window; once it expires, the same key can be claimed again (the expired claim is replaced in one
//! statement). Expiry is decided by PostgreSQL's `now()`.
//!
//! Fire keys are new for every fire, so the table grows: call [`FireClaims::purge`] now and then
//! (for example once an hour with `older_than` of one minute) to delete long-expired claims.
//!
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use std::time::{Duration, UNIX_EPOCH};
//! use pgtenure::{Db, fire_claims::FireClaims};
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let fires = FireClaims::new(&db).with_ttl(Duration::from_secs(120))?;
//! fires.create_table()?;
//!
//! let scheduled = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
//! let nanos = scheduled.duration_since(UNIX_EPOCH).unwrap().as_nanos();
//! if fires.claim(&format!("send-digest@{nanos}"))? {
//!     // run this fire
//! }
//! fires.purge(Duration::from_secs(60))?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::sql::Statements;
use crate::db::Db;
use crate::error::Result;
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::{default_owner, random_u64};
use crate::migrations::Kind;
use crate::observe;
use crate::table_name::TableName;

mod sql;

/// The table [`FireClaims::new`] uses unless [`FireClaims::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_fire_claims";

/// How long a fire claim stays reserved unless [`FireClaims::with_ttl`] says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);

/// Claims fire keys for a TTL; see the [module docs](self).
///
/// Cheap to clone, `Send` and `Sync`.
#[derive(Clone)]
pub struct FireClaims {
    db: Db,
    owner: Arc<str>,
    ttl_us: i64,
    ttl: Duration,
    sql: Arc<Statements>,
}

impl FireClaims {
    /// Fire claims in the table `pgtenure_fire_claims` with a 10 minute TTL, won under a fresh
    /// owner name (`"{hostname}-{pid}-{random hex}"`).
    pub fn new(db: &Db) -> FireClaims {
        let table = TableName::parse(DEFAULT_TABLE).expect("the default table name is valid");
        FireClaims {
            db: db.clone(),
            owner: default_owner().into(),
            ttl_us: micros("ttl", DEFAULT_TTL, MIN_DURATION).expect("the default TTL is valid"),
            ttl: DEFAULT_TTL,
            sql: Statements::new(table),
        }
    }

    /// Uses another table: `table` or `schema.table`, each part a plain identifier of at most 63
    /// bytes. Defaults to `pgtenure_fire_claims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the name is not a plain
    /// identifier.
    pub fn with_table(mut self, table: &str) -> Result<FireClaims> {
        self.sql = Statements::new(TableName::parse(table)?);
        Ok(self)
    }

    /// How long a won claim stays reserved. It must cover the largest expected jitter, clock skew
    /// and delayed catch-up between instances. Defaults to 10 minutes.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `ttl` is under 1 ms or over
    /// 100 years.
    pub fn with_ttl(mut self, ttl: Duration) -> Result<FireClaims> {
        self.ttl_us = micros("fire claim ttl", ttl, MIN_DURATION)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// Names this instance in the claims it wins (the table's `holder` column, for operators).
    /// Defaults to `"{hostname}-{pid}-{random hex}"`, distinct for every `FireClaims`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `owner` is blank, contains
    /// a NUL byte or is longer than 1,024 bytes.
    pub fn with_owner(mut self, owner: &str) -> Result<FireClaims> {
        check_key("fire claim owner", owner)?;
        self.owner = owner.into();
        Ok(self)
    }

    /// The name written into won claims.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The TTL of a won claim.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Creates the table and its `expires_at` index, or brings them to this version's schema (see
    /// [`crate::migrations`]); a table at this version is left as it is. Every instance may call
    /// it at startup, all at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Schema`](crate::ErrorKind::Schema) when the table was migrated by a newer
    /// pgtenure (nothing is changed; this one's handles still use it) or is recorded as another
    /// kind of pgtenure table; a database or connection error: creating and migrating need
    /// `CREATE` on the schema, which must exist, and ownership of the table.
    pub fn create_table(&self) -> Result<()> {
        self.db
            .migrate_table(Kind::FireClaims, &self.sql.table)
            .map(drop)
    }

    /// Claims `fire_key`: `true` when no live claim existed and this caller now holds it for the
    /// TTL, `false` when a live claim exists (this owner's own included). An expired claim for the
    /// key is replaced atomically. One statement, one round trip; a refused claim writes nothing.
    ///
    /// Each call carries a random claim id, stored with a win. When the connection fails after the
    /// claim was sent (the server may have committed it and only the answer was lost), the claim is
    /// sent once more on another connection: it finds its own win by the id and reports `true`, or
    /// claims now. So a won fire is never reported lost, and never won twice.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), with nothing stored, when
    /// `fire_key` is blank, contains a NUL byte or is longer than 1,024 bytes. Otherwise a database
    /// or connection error; an answer that cannot be read (a column of the table changed: see
    /// [`ErrorKind::Database`](crate::ErrorKind::Database)) is an error although the key may have
    /// been won.
    pub fn claim(&self, fire_key: &str) -> Result<bool> {
        check_key("fire key", fire_key)?;
        let claim_id = random_u64() as i64;
        let won = self
            .sql
            .claim(&self.db, fire_key, &self.owner, self.ttl_us, claim_id)?;
        log::debug!(
            target: "pgtenure::fire_claims",
            "claim of fire {fire_key:?}: {}",
            if won { "won" } else { "refused" }
        );
        observe::fire_claim(won);
        Ok(won)
    }

    /// Deletes the claims that expired more than `older_than` ago by the database clock and returns
    /// how many. `Duration::ZERO` deletes every expired claim; a buffer (a minute, say) keeps claims
    /// that instances with a late schedule may still be asking for.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `older_than` is over 100
    /// years. Otherwise a database or connection error.
    pub fn purge(&self, older_than: Duration) -> Result<u64> {
        let older_us = micros("purge older_than", older_than, Duration::ZERO)?;
        let purged = self.sql.purge(&self.db, older_us)?;
        log::debug!(target: "pgtenure::fire_claims", "purged {purged} expired fire claims");
        Ok(u64::try_from(purged).unwrap_or_default())
    }
}

impl fmt::Debug for FireClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FireClaims")
            .field("table", &self.sql.table)
            .field("owner", &self.owner)
            .field("ttl", &self.ttl)
            .finish()
    }
}
