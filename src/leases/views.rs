//! What operators and refused acquirers look at: who holds a key ([`Leases::holder`]), every key
//! under a prefix ([`Leases::list`]), the table at a glance for monitoring ([`Leases::summary`]),
//! why an acquire was refused ([`Leases::refusal`]), and the operator's way out
//! ([`Leases::force_release`]).

use std::fmt;
use std::time::{Duration, SystemTime};

use super::sql::{LeaseRow, SummaryRow};
use super::{Lease, Leases};
use crate::error::{Error, Result};
use crate::input::{check_key, MAX_KEY_BYTES};
use crate::timestamp::Timestamp;

/// The leases table at a glance ([`Leases::summary`]): counts, and the held leases closest to
/// lapsing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSummary {
    /// Rows in the table, held or lapsed.
    pub rows: i64,
    /// Leases held now, by the database clock.
    pub held: i64,
    /// Held leases whose holder was asked to give them up ([`Leases::supersede`]).
    pub superseded: i64,
    /// When the held lease closest to lapsing lapses unless renewed (database time); `None` when
    /// none is held.
    pub next_lapse: Option<SystemTime>,
    /// The held leases closest to lapsing, at most as many as asked, soonest first (then by key).
    pub soonest: Vec<LeaseInfo>,
}

/// One lease row, live or lapsed ([`Leases::holder`], [`Leases::list`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseInfo {
    /// The key.
    pub key: String,
    /// The owner the row names ([`Leases::with_owner`]): the holder while [`LeaseInfo::live`], else
    /// the last one.
    pub owner: String,
    /// The row's fencing token. After [`Leases::force_release`] it is a fresh token that no holder
    /// has.
    pub token: i64,
    /// When the tenure began (database time).
    pub acquired_at: SystemTime,
    /// When the lease lapses unless renewed (database time); when it lapsed or was released, if past.
    pub held_until: SystemTime,
    /// Whether a contender asked for the key ([`Leases::supersede`]).
    pub superseded: bool,
    /// Whether the lease is held now, by the database clock.
    pub live: bool,
    /// Whether the tenure is (or, once lapsed, was) a managed lease's ([`Leases::acquire`]) rather
    /// than a raw grant ([`Leases::try_acquire`]). A managed tenure belongs to its [`Lease`]: raw
    /// calls under the same owner name (another family, another process) neither re-acquire,
    /// renew nor release it. `false` for a managed lease of a build older than leases schema
    /// version 3, during a rolling upgrade (`docs/upgrading.md`).
    pub managed: bool,
}

/// Why an acquire of a key was refused, as read just after ([`Leases::refusal`],
/// [`Leases::acquire_or_refusal`]).
///
/// The row is read by a statement of its own after the refused acquire, so it can already be
/// newer: [`Refusal::Vacant`] says the key was given up in between (try again).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A managed lease of this `Leases` family (this handle or a clone) holds the key, or is still
    /// releasing it; its row as read, if any.
    ThisFamily(Option<LeaseInfo>),
    /// This owner holds the key live, outside this family: a raw grant ([`Leases::try_acquire`]),
    /// or a managed lease of another `Leases` or process with the same owner name
    /// ([`LeaseInfo::managed`]), which no other handle adopts: it waits for its release or lapse.
    SameOwner(LeaseInfo),
    /// Another owner holds the key live.
    OtherOwner(LeaseInfo),
    /// Nobody holds the key any more (released or lapsed since the refusal); the row as read, if
    /// the key still has one.
    Vacant(Option<LeaseInfo>),
    /// Nobody holds the key, but the server was promoted from a standby and grants of lapsed and
    /// absent keys wait until `until` (database time), one longest TTL after the promotion was
    /// first seen ([`Db::with_promotion_hold_off`](crate::Db::with_promotion_hold_off)).
    HeldOff {
        /// The key's row as read, if it has one.
        row: Option<LeaseInfo>,
        /// When grants resume.
        until: SystemTime,
    },
}

impl Refusal {
    /// The key's row as read, if it has one.
    pub fn row(&self) -> Option<&LeaseInfo> {
        match self {
            Refusal::SameOwner(row) | Refusal::OtherOwner(row) => Some(row),
            Refusal::ThisFamily(row) | Refusal::Vacant(row) | Refusal::HeldOff { row, .. } => {
                row.as_ref()
            }
        }
    }
}

impl From<LeaseRow> for LeaseInfo {
    fn from(row: LeaseRow) -> LeaseInfo {
        LeaseInfo {
            key: row.key,
            owner: row.owner,
            token: row.token,
            acquired_at: row.acquired_at,
            held_until: row.held_until,
            superseded: row.superseded,
            live: row.live,
            managed: row.managed,
        }
    }
}

impl From<SummaryRow> for LeaseSummary {
    fn from(row: SummaryRow) -> LeaseSummary {
        LeaseSummary {
            rows: row.rows,
            held: row.held,
            superseded: row.superseded,
            next_lapse: row.next_lapse,
            soonest: row.soonest.into_iter().map(LeaseInfo::from).collect(),
        }
    }
}

/// `lease "k": held by worker-1 (token 7) since 2026-12-03T06:00:00.000Z until
/// 2026-12-03T06:00:30.000Z`, `, superseded` when asked to give it up, or `lapsed at …` once it is
/// not held.
impl fmt::Display for LeaseInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (key, owner, token) = (&self.key, &self.owner, self.token);
        if self.live {
            write!(
                f,
                "lease {key:?}: held by {owner} (token {token}) since {} until {}",
                Timestamp::new(self.acquired_at),
                Timestamp::new(self.held_until)
            )?;
            if self.superseded {
                f.write_str(", superseded")?;
            }
            Ok(())
        } else {
            write!(
                f,
                "lease {key:?}: not held; last held by {owner} (token {token}), lapsed at {}",
                Timestamp::new(self.held_until)
            )
        }
    }
}

/// Why, in a sentence for a log line: `held by another owner: lease "k": held by …`.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::ThisFamily(row) => {
                f.write_str("a managed lease of this Leases family holds it or is releasing it")?;
                if let Some(row) = row {
                    write!(f, ": {row}")?;
                }
                Ok(())
            }
            Refusal::SameOwner(row) => write!(f, "this owner holds it outside this family: {row}"),
            Refusal::OtherOwner(row) => write!(f, "held by another owner: {row}"),
            Refusal::Vacant(row) => {
                f.write_str("nobody holds it now (given up since the refusal): acquire again")?;
                if let Some(row) = row {
                    write!(f, "; {row}")?;
                }
                Ok(())
            }
            Refusal::HeldOff { row, until } => {
                write!(
                    f,
                    "nobody holds it, but grants wait out a promotion of the server until {}",
                    Timestamp::new(*until)
                )?;
                if let Some(row) = row {
                    write!(f, "; {row}")?;
                }
                Ok(())
            }
        }
    }
}

impl Leases {
    /// The row of `key`, live or lapsed ([`LeaseInfo::live`] says which, by the database clock), or
    /// `None` when the key has no row. One statement.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when the key
    /// is blank, contains a NUL byte or is over 1,024 bytes; otherwise a database or connection error.
    pub fn holder(&self, key: &str) -> Result<Option<LeaseInfo>> {
        check_key("lease key", key)?;
        let row = self.shared.sql.holder(&self.shared.db, key)?;
        Ok(row.map(LeaseInfo::from))
    }

    /// Every row whose key starts with `prefix` (`""`: every key), live or lapsed, in key order.
    /// `%` and `_` in `prefix` are plain characters. One statement that reads the whole table: an
    /// operator's view, not something to poll in a loop. Lapsed rows stay until a release's cleanup
    /// deletes them an hour after they lapsed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), before any statement, when the
    /// prefix contains a NUL byte or is over 1,024 bytes; otherwise a database or connection error.
    pub fn list(&self, prefix: &str) -> Result<Vec<LeaseInfo>> {
        if prefix.contains('\0') {
            return Err(Error::invalid_input(
                "lease key prefix contains a NUL byte, which PostgreSQL text cannot store",
            ));
        }
        if prefix.len() > MAX_KEY_BYTES {
            return Err(Error::invalid_input(format!(
                "lease key prefix is {} bytes long; keys are at most {MAX_KEY_BYTES} bytes",
                prefix.len()
            )));
        }
        let rows = self.shared.sql.list(&self.shared.db, prefix)?;
        Ok(rows.into_iter().map(LeaseInfo::from).collect())
    }

    /// The table at a glance, for monitoring: how many rows, how many leases are held and
    /// superseded, when the next one lapses, and the `soonest` held leases closest to lapsing. One
    /// statement, which reads the table once on the server and sends at most `soonest` rows: its
    /// cost is the table's size, never the rows it sends, unlike [`Leases::list`]. What the
    /// command's exporter scrapes.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn summary(&self, soonest: usize) -> Result<LeaseSummary> {
        // More than any table holds: every held lease.
        let soonest = i64::try_from(soonest).unwrap_or(i64::MAX);
        let summary = self.shared.sql.summary(&self.shared.db, soonest)?;
        Ok(LeaseSummary::from(summary))
    }

    /// An operator's release: ends the live tenure of `key` now, whoever holds it (not guarded by
    /// owner). Returns whether a live lease was ended.
    ///
    /// The row stays and gets a fresh token from the key's sequence that no holder has, so tokens
    /// stay monotonic and the ended tenure cannot come back: a managed holder learns
    /// [`LeaseLoss::Refused`](crate::leases::LeaseLoss::Refused) at its next renewal (within a third of
    /// its TTL; also a renewal already waiting for the row's lock, whose transaction began before
    /// this one), its [`Leases::fence`] fails from now on, and a raw holder's [`Leases::renew`]
    /// reports the key [`KeyRenewal::Lost`](crate::leases::KeyRenewal::Lost). (Raw renewals are guarded by
    /// owner only: one that was already waiting for the row's lock renews it under the new token,
    /// which its [`KeyRenewal::Held`](crate::leases::KeyRenewal::Held) shows.)
    /// The next acquire, by anyone, wins a new tenure at once.
    ///
    /// This cuts a tenure short: a holder that is paused (or cut off from the database) still
    /// believes it holds the key until its local deadline. Only writes fenced with
    /// [`Leases::fence`] are safe from it; prefer [`Leases::supersede`] for a holder that is alive.
    ///
    /// Sent once: when the connection fails after sending, the error says the outcome is unknown;
    /// read the row with [`Leases::holder`] (or call this again: a second release finds nothing live
    /// and returns `false`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad key; otherwise a database
    /// or connection error.
    pub fn force_release(&self, key: &str) -> Result<bool> {
        check_key("lease key", key)?;
        let ended = self.shared.sql.force_release(&self.shared.db, key)?;
        if let Some(owner) = &ended {
            log::info!(target: "pgtenure::leases", "force-released lease {key:?} held by {owner}");
        }
        Ok(ended.is_some())
    }

    /// Why an acquire of `key` by this family would be refused now: a managed lease of this family
    /// holds it, this owner holds it outside the family, another owner holds it, nobody does (then
    /// acquire again), or nobody does but grants wait out a promotion of the server (then acquire
    /// again at the time it gives). Call it after [`Leases::acquire`] or [`Leases::try_acquire`] returned
    /// `None`; one statement (a read).
    ///
    /// # Errors
    ///
    /// As [`Leases::holder`].
    pub fn refusal(&self, key: &str) -> Result<Refusal> {
        check_key("lease key", key)?;
        let family = self.shared.held.lock().contains(key);
        let (row, grants_from) = self.shared.sql.refusal(&self.shared.db, key)?;
        let row = row.map(LeaseInfo::from);
        let held_off = grants_from.filter(|_| self.shared.db.promotion_hold_off());
        Ok(match (row, held_off) {
            (row, _) if family => Refusal::ThisFamily(row),
            (Some(row), _) if row.live && row.owner == self.owner() => Refusal::SameOwner(row),
            (Some(row), _) if row.live => Refusal::OtherOwner(row),
            (row, Some(until)) => Refusal::HeldOff { row, until },
            (row, None) => Refusal::Vacant(row),
        })
    }

    /// [`Leases::acquire`], saying why when it is refused: `Ok(Ok(lease))` when acquired,
    /// `Ok(Err(refusal))` when not ([`Leases::refusal`], read by a second statement right after the
    /// refused acquire).
    ///
    /// # Errors
    ///
    /// As [`Leases::acquire`], and a database or connection error from reading the refusal.
    pub fn acquire_or_refusal(
        &self,
        key: &str,
        ttl: Duration,
    ) -> Result<std::result::Result<Lease, Refusal>> {
        match self.acquire(key, ttl)? {
            Some(lease) => Ok(Ok(lease)),
            None => Ok(Err(self.refusal(key)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn row(live: bool, superseded: bool) -> LeaseInfo {
        LeaseInfo {
            key: "k".into(),
            owner: "worker-1".into(),
            token: 7,
            acquired_at: UNIX_EPOCH + Duration::from_secs(1_764_625_400),
            held_until: UNIX_EPOCH + Duration::from_secs(1_764_625_430),
            superseded,
            live,
            managed: false,
        }
    }

    #[test]
    fn lease_views_print_as_a_log_line_with_rfc_3339_times() {
        assert_eq!(
            row(true, false).to_string(),
            "lease \"k\": held by worker-1 (token 7) since 2025-12-01T21:43:20.000Z until \
             2025-12-01T21:43:50.000Z"
        );
        assert!(row(true, true).to_string().ends_with(", superseded"));
        assert_eq!(
            row(false, false).to_string(),
            "lease \"k\": not held; last held by worker-1 (token 7), lapsed at \
             2025-12-01T21:43:50.000Z"
        );
        assert_eq!(
            Refusal::OtherOwner(row(true, false)).to_string(),
            format!("held by another owner: {}", row(true, false))
        );
        assert_eq!(
            Refusal::Vacant(None).to_string(),
            "nobody holds it now (given up since the refusal): acquire again"
        );
        let held_off = Refusal::HeldOff {
            row: None,
            until: UNIX_EPOCH,
        };
        assert!(held_off
            .to_string()
            .ends_with("until 1970-01-01T00:00:00.000Z"));
        assert!(Refusal::ThisFamily(None)
            .to_string()
            .starts_with("a managed lease"));
        assert!(Refusal::SameOwner(row(true, false))
            .to_string()
            .starts_with("this owner holds it outside this family: lease"));
    }
}
