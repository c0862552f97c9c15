//! Leader election: a blocking `is_leader` that renews, and a campaign loop with events.
//!
//! Every instance of a fleet polls [`Elector::is_leader`] (say every few seconds, well inside the TTL).
//! Each poll is one statement that renews the leadership when this instance holds it, or takes it
//! when it is free or expired by the database clock. No background thread, nothing to close.
//!
//! Beyond taking and renewing the leadership:
//!
//! - [`Elector::term`]: the current tenure's term, a fencing token that strictly increases across
//!   tenures (drawn from a sequence);
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
//! ```no_run
//! # fn main() -> Result<(), pgtenure::Error> {
//! use pgtenure::{Db, Elector};
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
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use self::sql::{PollAnswer, Statements};
use crate::db::{Companion, Db};
use crate::error::Result;
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::default_owner;
use crate::table_name::TableName;
use crate::timestamp::Timestamp;

/// The table [`Elector::new`] uses unless [`Elector::with_table`] names another.
pub const DEFAULT_TABLE: &str = "pgtenure_leader";

/// The fleet name [`Elector::new`] uses unless [`Elector::with_name`] names another.
pub const DEFAULT_NAME: &str = "default";

/// The leadership TTL unless [`Elector::with_ttl`] says otherwise. Failover can take one TTL.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

mod campaign;
mod sql;

pub use self::campaign::{
    LeaderEvent, LeaderHooks, LeaderLoss, Leadership, NoLeaderHooks, EVENTS_CAPACITY,
};

/// Who leads a fleet, by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The fleet's name ([`Elector::with_name`]).
    pub name: String,
    /// The leader's holder name.
    pub holder: String,
    /// The tenure's term.
    pub term: i64,
    /// When this tenure began.
    pub elected_at: SystemTime,
    /// When it expires unless renewed.
    pub expires_at: SystemTime,
    /// Whether the tenure is live by the database clock. Always `true` from [`Elector::leader`] and
    /// [`LeaderEvent::Observed`]; [`Elector::leaders`] also lists fleets whose last tenure expired
    /// or was resigned (`false`: nobody leads that fleet now).
    pub live: bool,
    /// Whether the leader was asked to step down ([`Elector::request_resign`]): at its next
    /// renewal it stops believing, then resigns (or its tenure runs out at the expiry shown, which
    /// that renewal does not extend). Read by [`Elector::leader`] and
    /// [`Elector::leaders`]; a campaign's poll does not read it (`false` there).
    pub resign_requested: bool,
}

/// `fleet "billing": led by node-2 (term 7) since 2026-12-03T06:00:00.000Z until
/// 2026-12-03T06:00:30.000Z`, `, asked to resign` when it was; `nobody leads (last: …, ended …)`
/// when the tenure is over.
impl fmt::Display for LeaderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, holder, term) = (&self.name, &self.holder, self.term);
        if self.live {
            write!(
                f,
                "fleet {name:?}: led by {holder} (term {term}) since {} until {}",
                Timestamp(self.elected_at),
                Timestamp(self.expires_at)
            )?;
            if self.resign_requested {
                f.write_str(", asked to resign")?;
            }
            Ok(())
        } else {
            write!(
                f,
                "fleet {name:?}: nobody leads (last: {holder}, term {term}, ended {})",
                Timestamp(self.expires_at)
            )
        }
    }
}

/// What one poll found.
#[derive(Debug, Clone)]
struct Poll {
    /// This elector leads, and the answer came before the tenure's local deadline.
    leading: bool,
    /// This elector was asked to step down ([`Elector::request_resign`]): the poll did not extend
    /// its tenure, and it stopped believing in it; the term waits to be resigned.
    ended: bool,
    /// Who leads by the poll's statement (this elector included).
    leader: Option<LeaderInfo>,
}

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

/// What an elector knows of its tenure.
#[derive(Debug, Default)]
struct Tenure {
    /// The term this elector won and has not seen end: its renewals and its resignation are guarded
    /// by it. Kept through a failed poll (the tenure may still be live).
    term: Option<i64>,
    /// Until when it leads by its last successful poll; `None` after a failed poll.
    deadline: Option<Instant>,
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

impl Tenure {
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
    /// How often `campaign` polls; `None`: a third of the TTL.
    retry: Option<Duration>,
    sql: Arc<Statements>,
    tenure: Arc<Mutex<Tenure>>,
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
    /// 100 years.
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Elector> {
        self.ttl_us = micros("leader ttl", ttl, MIN_DURATION)?;
        self.ttl = ttl;
        Ok(self)
    }

    /// How often [`Elector::campaign`]'s thread polls (and so renews while leading); it must be
    /// below the TTL, checked by `campaign`. Defaults to a third of the TTL.
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

    /// Creates the table and its term sequence unless the table exists. Every instance may call it
    /// at startup, all at once.
    ///
    /// # Errors
    ///
    /// A database or connection error; creating needs `CREATE` on the schema, which must exist.
    pub fn create_table(&self) -> Result<()> {
        self.db.create_table(
            "create leader table",
            &self.sql.table,
            &self.sql.create,
            &[
                Companion::sequence(self.sql.table.derived("term_seq")),
                Companion::promotion(&self.sql.table, self.db.timeline_tokens()),
            ],
        )
    }

    /// Whether this instance leads the fleet now: renews the tenure if it holds it, takes it if it is
    /// free or expired. One statement, one round trip; a follower's poll writes nothing.
    ///
    /// Renewals are guarded by term: an elector renews only the term it won, so a second elector
    /// with the same holder name (a misconfiguration, or a restarted process that reuses its name)
    /// never adopts another's tenure; it waits until that tenure is resigned or expires. Answers
    /// `false` when the answer arrives after the tenure's local deadline (the instant before the poll
    /// was sent, plus the TTL).
    ///
    /// A renewal that finds a resignation requested ([`Elector::request_resign`]) answers `false`
    /// and leaves the tenure as it was, neither extended nor ended, so that this instance stops
    /// believing before anyone else can be elected. The next call resigns it (as after a
    /// [`resign`](Elector::resign) that failed, below); until then it expires at its old expiry.
    ///
    /// After a [`resign`](Elector::resign) that failed, or a requested resignation, the next call
    /// sends that resignation first (the tenure is never renewed again) and answers `false` without
    /// campaigning, so that another member wins; the call after it campaigns again. When that
    /// resignation fails, its error is returned and the next call tries again.
    ///
    /// When the connection fails after the poll was sent, it is sent once more on another
    /// connection: a renewal is idempotent. A new tenure won by a poll whose answer was lost is not
    /// adopted (nothing can tell it from another elector's with the same name): it expires after one
    /// TTL, as after a crash.
    ///
    /// # Errors
    ///
    /// A database or connection error; leadership is dropped first, so [`Elector::term`] is `None`
    /// until a poll succeeds again. Treat an error as "not the leader".
    pub fn is_leader(&self) -> Result<bool> {
        if self.tenure.lock().resigning.is_some() {
            self.finish_resign()?;
            return Ok(false);
        }
        Ok(self.poll_keeping(false)?.leading)
    }

    /// One poll (the statement of [`Elector::is_leader`]), adopting its outcome into the shared
    /// tenure; also says who leads by that statement's view. A failed poll drops the leadership at
    /// once, unless `keep` (the campaign's loop: its watcher ends it at the local deadline).
    fn poll_keeping(&self, keep: bool) -> Result<Poll> {
        let (guard, epoch) = {
            let tenure = self.tenure.lock();
            (tenure.term, tenure.resigned)
        };
        let result = self
            .db
            .grant(&self.sql.promotion, self.ttl_us, |promotion| {
                let (name, holder) = (&self.name, &self.holder);
                self.sql
                    .is_leader(&self.db, name, holder, self.ttl_us, guard, promotion)
            });
        let mut tenure = self.tenure.lock();
        let (answer, sent) = match result {
            Ok(answered) => answered,
            Err(e) => {
                if !keep {
                    tenure.deadline = None;
                }
                return Err(e);
            }
        };
        let PollAnswer {
            leader,
            mine,
            ended,
            my_term,
            ..
        } = answer;
        let ended = my_term.filter(|_| ended);
        let won = my_term.filter(|_| mine);
        let not_leading = Poll {
            leading: false,
            ended: ended.is_some(),
            leader: leader.clone(),
        };
        if tenure.resigned != epoch {
            // A clone resigned (or a campaign stopped) while this poll was in flight: whatever it
            // renewed or won is being given up (or already was); do not lead on it. A term it won
            // anew is resigned like the one given up (the statement is guarded by holder and
            // term), rather than left to expire.
            if let Some(term) = won {
                // Terms only grow: a newer term waiting to be resigned is not replaced.
                if tenure.term.is_none() && tenure.resigning.is_none_or(|waiting| waiting <= term) {
                    tenure.resigning = Some(term);
                }
            }
            return Ok(not_leading);
        }
        let Some(term) = won else {
            // Forget the term only if no other poll (on a clone) has moved it on meanwhile.
            if tenure.term == guard {
                if let Some(lost) = tenure.term.take() {
                    log::info!(
                        target: "pgtenure::elector",
                        "{} no longer leads fleet {:?} (term {lost} {})",
                        self.holder,
                        self.name,
                        if ended.is_some() {
                            "asked to step down: it resigns next"
                        } else {
                            "ended"
                        }
                    );
                }
                tenure.deadline = None;
                if ended.is_some() {
                    // Still live in the database, at its old expiry: resigned once this belief's
                    // end has been told (the campaign's `Lost`, or is_leader's `false`).
                    tenure.resigning = ended;
                }
            }
            return Ok(not_leading);
        };
        let deadline = sent + self.ttl;
        if tenure.term != Some(term) {
            log::info!(
                target: "pgtenure::elector",
                "{} leads fleet {:?} with term {term}",
                self.holder,
                self.name
            );
        }
        // Keep the term even if the answer came too late: resign() then still targets this tenure.
        tenure.term = Some(term);
        tenure.deadline = Some(deadline);
        Ok(Poll {
            leading: Instant::now() < deadline,
            ended: false,
            leader,
        })
    }

    /// The current tenure's term while this instance leads (by its last successful poll and the local
    /// deadline), else `None`.
    pub fn term(&self) -> Option<i64> {
        self.tenure.lock().leading(Instant::now())
    }

    /// Gives up the leadership at once (guarded by holder and term), so the next `is_leader`
    /// elsewhere wins without waiting for the TTL. Does nothing, and sends nothing, when this elector
    /// has won no term it has not seen end.
    ///
    /// This elector stops believing before the statement is sent ([`Elector::term`] is `None`
    /// from then on), but keeps the term until a resignation of it succeeds: a `resign` that failed
    /// (a timeout, a lost connection) can be called again, and resigns the same term. Meanwhile the
    /// term is never renewed: the next [`Elector::is_leader`] sends the resignation first (see
    /// there). The statement is guarded by holder and term, so sending it again never ends a
    /// newer tenure.
    ///
    /// On the elector of a running campaign ([`Elector::campaign`]: [`Leadership::elector`], or a
    /// clone of the elector campaigning), the campaign stops believing first: its
    /// [`Leadership::is_leading`] turns false and it delivers [`LeaderEvent::Lost`] with
    /// [`LeaderLoss::Resigned`] (to the events and the hooks) before the resignation is sent, so the
    /// database frees the leadership only after its holder stopped believing in it. The campaign
    /// then stands aside for one TTL (it only observes who leads), so that another member wins, and
    /// campaigns again. Called from one of that campaign's own hooks, the resignation is left to the
    /// campaign's thread, which sends it once the hook returned and the `Lost` was delivered (at its
    /// next poll at the latest); this call then returns `Ok` without sending it.
    ///
    /// # Errors
    ///
    /// A database or connection error; call `resign` again (or let the tenure expire at its TTL).
    pub fn resign(&self) -> Result<()> {
        let campaign = self
            .tenure
            .lock()
            .campaign
            .0
            .as_ref()
            .and_then(Weak::upgrade);
        if let Some(campaign) = campaign {
            return campaign.resign();
        }
        self.stand_down();
        self.finish_resign()
    }

    /// Stops believing in the tenure at once: the term it won becomes the one to resign
    /// ([`Elector::finish_resign`]), never renewed; a poll in flight (on a clone) does not bring it
    /// back. Returns whether it believed in a term.
    fn stand_down(&self) -> bool {
        let mut tenure = self.tenure.lock();
        tenure.resigned += 1;
        tenure.deadline = None;
        if let Some(term) = tenure.term.take() {
            // A term still waiting to be resigned is older and over: this one was won (with no
            // guard) only once that row was free or expired.
            tenure.resigning = Some(term);
            return true;
        }
        false
    }

    /// Whether a term waits to be resigned ([`Elector::finish_resign`]).
    fn resign_pending(&self) -> bool {
        self.tenure.lock().resigning.is_some()
    }

    /// Resigns the term this elector stood down from, if any; forgets it only once the statement
    /// succeeded (it finds the tenure live and ends it, or finds it over). The statement is
    /// idempotent (guarded by holder and term), so a failure, even one of unknown outcome, leaves
    /// it to be sent again.
    fn finish_resign(&self) -> Result<()> {
        let Some(term) = self.tenure.lock().resigning else {
            return Ok(());
        };
        let resigned = self.sql.resign(&self.db, &self.name, &self.holder, term)?;
        {
            let mut tenure = self.tenure.lock();
            if tenure.resigning == Some(term) {
                tenure.resigning = None;
            }
        }
        if resigned {
            log::info!(
                target: "pgtenure::elector",
                "{} resigned the leadership of fleet {:?} (term {term})",
                self.holder,
                self.name
            );
        }
        Ok(())
    }

    /// Asks the fleet's live leader to step down (a rolling deploy, moving leadership off a node):
    /// its next renewal does not extend its tenure; the leader stops believing (a campaigning
    /// leader reports [`LeaderLoss::ResignRequested`], a polling one gets `false`), then resigns,
    /// and the next poll elsewhere wins. The database frees the leadership only after its holder
    /// has stopped believing in it: if the leader dies in between, its tenure expires at its old
    /// expiry. Returns whether a live leader was asked. Any member may ask, the leader too.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn request_resign(&self) -> Result<bool> {
        let asked = self.sql.request_resign(&self.db, &self.name)?;
        if let Some((holder, term)) = &asked {
            log::info!(
                target: "pgtenure::elector",
                "asked {holder} to step down from fleet {:?} (term {term})",
                self.name,
            );
        }
        Ok(asked.is_some())
    }

    /// Who leads the fleet now by the database clock, or `None`.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn leader(&self) -> Result<Option<LeaderInfo>> {
        self.sql.leader(&self.db, &self.name)
    }

    /// Every fleet in this elector's table, in name order, with its leader: live leaders, and the
    /// last tenure of fleets nobody leads now ([`LeaderInfo::live`] false). Liveness is decided by
    /// the database clock. One statement that reads the whole table (one row per fleet): an
    /// operator's view, not something to poll in a loop. This elector's own name does not matter.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn leaders(&self) -> Result<Vec<LeaderInfo>> {
        self.sql.leaders(&self.db)
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
        self.sql.fence(tx, &self.name, &self.holder, term)
    }
}

impl fmt::Debug for Elector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elector")
            .field("table", &self.sql.table)
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("ttl", &self.ttl)
            .field("term", &self.term())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Elector>();
        check::<LeaderInfo>();
    }

    #[test]
    fn a_leader_prints_as_a_log_line_with_rfc_3339_times() {
        let mut info = LeaderInfo {
            name: "billing".into(),
            holder: "node-2".into(),
            term: 7,
            elected_at: std::time::UNIX_EPOCH,
            expires_at: std::time::UNIX_EPOCH + Duration::from_secs(30),
            live: true,
            resign_requested: true,
        };
        assert_eq!(
            info.to_string(),
            "fleet \"billing\": led by node-2 (term 7) since 1970-01-01T00:00:00.000Z until \
             1970-01-01T00:00:30.000Z, asked to resign"
        );
        info.live = false;
        assert_eq!(
            info.to_string(),
            "fleet \"billing\": nobody leads (last: node-2, term 7, ended \
             1970-01-01T00:00:30.000Z)"
        );
    }
}
