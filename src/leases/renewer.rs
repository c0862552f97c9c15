//! A managed lease's thread: renews every third of the TTL, retries transient failures until the
//! local deadline, and runs the release its handle asks for.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, select, Receiver, Sender};

use super::family::{Family, WatchedFamily};
use super::sql::RenewTenure;
use super::state::{LeaseLoss, LeaseState, Purpose, Status};
use super::timing::{next_retry, renew_interval};
use super::watcher::Watch;
use crate::db::{discard, Connection, Policy};
use crate::error::Result;
use crate::observe;
use crate::statement::Failure;

/// What the handle asks of its lease's thread.
pub(super) enum Command {
    /// Stop renewing, release the row if it is still this tenure's (`status` is what the lease was
    /// when the release began), and report; wait for a pool connection until `until` at most.
    Release { was: Status, until: Instant },
}

/// What a lease's thread needs: the family, not the [`Leases`](crate::leases::Leases) handle, so that it
/// never keeps the deadline watcher alive (it reaches the watcher through a weak reference).
pub(super) struct Renewer {
    pub(super) family: Arc<Family>,
    pub(super) shared: Weak<WatchedFamily>,
}

impl Renewer {
    /// Runs one statement of this lease with its cancel key handed to the watcher; a connection
    /// whose key the watcher took is discarded, since the cancel could land on its next statement.
    fn run_cancellable<T>(
        &self,
        state: &LeaseState,
        purpose: Purpose,
        conn: &mut Connection,
        statement: impl FnOnce(&mut Connection) -> std::result::Result<T, Failure>,
    ) -> std::result::Result<T, Failure> {
        let cancellable = self.family.db.cancels_on_deadline();
        if cancellable {
            state.set_in_flight(purpose, self.family.db.cancel_key(conn));
        }
        let mut result = statement(conn);
        if cancellable && !state.clear_in_flight(purpose) {
            log::debug!(
                target: "pgtenure::leases",
                "lease {:?}: its statement's cancel key was handed out; discarding the connection",
                state.key
            );
            discard(conn);
            conn.never_park();
            // The watcher took the key to cancel this statement: a cancellation is its doing.
            if let Err(failure) = &mut result {
                failure.cancelled = Some(match purpose {
                    Purpose::Renew => {
                        "pgtenure cancelled it at the lease's local deadline, which passed before \
                         the renewal answered (the database or the network was too slow): the \
                         lease is lost; acquire it again"
                    }
                    Purpose::Release => {
                        "pgtenure cancelled it after 4.5 s, the release's bound (it waited for \
                         the lease's row, which a transaction still holds: a fenced write left \
                         open?); the row lapses at its expiry"
                    }
                });
            }
        }
        result
    }

    /// One renewal: `Some(superseded)` when still ours, `None` when refused; also the instant before
    /// the renewal that answered was sent.
    fn renew(&self, state: &LeaseState) -> (Result<Option<bool>>, Instant) {
        let mut sent = Instant::now();
        // Waiting for a connection past the deadline cannot save the lease.
        let policy = Policy::IDEMPOTENT.until(state.deadline());
        let timeline = self
            .family
            .db
            .promotion_timeline(&self.family.sql.promotion);
        let rows = self.family.db.with_conn("renew lease", policy, |conn| {
            sent = Instant::now();
            let family = &self.family;
            // Prepared first: the cancel key then covers only the renewal itself.
            family.sql.prepare_renew_tenure(&family.db, conn)?;
            let params = RenewTenure {
                key: &state.key,
                owner: &family.owner,
                token: state.token,
                ttl_us: state.ttl_us,
                timeline,
            };
            self.run_cancellable(state, Purpose::Renew, conn, |conn| {
                family.sql.renew_tenure(&family.db, conn, &params)
            })
        });
        // An answer whose row could not be read is an error of its own (a changed table).
        let rows = rows.and_then(|read| read);
        self.family.note(&rows);
        if rows
            .as_ref()
            .is_ok_and(|renewed| renewed.as_ref().is_some_and(|r| r.stale))
        {
            // The server was promoted: the first to read the record records it.
            let family = &self.family;
            family
                .db
                .refresh_promotion(&family.sql.promotion, state.ttl_us);
        }
        let outcome = rows.map(|renewed| renewed.map(|renewed| renewed.superseded));
        (outcome, sent)
    }

    /// Releases the row (guarded by owner and token) if the lease was held or superseded when its
    /// release began.
    fn release(&self, state: &Arc<LeaseState>, was: Status, until: Instant) -> Result<()> {
        if !matches!(was, Status::Held | Status::Lost(LeaseLoss::Superseded)) {
            return Ok(());
        }
        // The watcher cancels the statement if it overruns RELEASE_WAIT (a row lock held elsewhere).
        if let Some(shared) = self.shared.upgrade() {
            shared.watch(Watch::Deadline(state.clone()))?;
        }
        let released =
            self.family
                .db
                .with_conn("release lease", Policy::ONCE.until(until), |conn| {
                    let family = &self.family;
                    let sweep = family.sweep_due();
                    // Prepared first: the cancel key then covers only the release itself.
                    family.sql.prepare_release(&family.db, conn, sweep)?;
                    self.run_cancellable(state, Purpose::Release, conn, |conn| {
                        let owner = &family.owner;
                        let token = Some(state.token);
                        family
                            .sql
                            .release(&family.db, conn, sweep, &state.key, owner, token)
                    })
                });
        // An answer whose row could not be read is an error of its own (a changed table).
        let released = released.and_then(|read| read);
        self.family.note(&released);
        if !released? {
            log::debug!(
                target: "pgtenure::leases",
                "release of lease {:?} token {}: it had already lapsed",
                state.key,
                state.token
            );
        }
        Ok(())
    }

    /// The lease's thread: renew every third of the TTL, retry transient failures until the local
    /// deadline, stop renewing on loss; then wait for the handle's release, run it, report it, and
    /// forget the key in the family (only then may the family acquire it again).
    pub(super) fn run(
        self,
        state: Arc<LeaseState>,
        commands: Receiver<Command>,
        reply: Sender<Result<()>>,
        first: Instant,
    ) {
        let interval = renew_interval(state.ttl);
        let mut next = Some(first + interval);
        let command = loop {
            let timer = next.map_or_else(crossbeam_channel::never, at);
            select! {
                recv(commands) -> command => break command.ok(),
                recv(timer) -> _ => {}
            }
            next = self.renew_once(&state, interval);
        };
        let result = match command {
            Some(Command::Release { was, until }) => self.release(&state, was, until),
            // The handle went away without a release (it cannot: Drop releases).
            None => Ok(()),
        };
        state.end_release();
        // The release has completed: the family may acquire the key again.
        self.family.forget(&state.key);
        let _ = reply.send(result);
    }

    /// One renewal step; the next renewal's time, or `None` when the lease is no longer held.
    fn renew_once(&self, state: &LeaseState, interval: Duration) -> Option<Instant> {
        if !state.is_held() {
            // Expired (the watcher sends the loss) or being released.
            return None;
        }
        let (renewed, sent) = self.renew(state);
        let answered = Instant::now();
        let slack = state.deadline().checked_duration_since(answered);
        let outcome = match &renewed {
            Ok(Some(false)) => "renewed",
            Ok(Some(true)) => "superseded",
            Ok(None) => "refused",
            Err(_) => "failed",
        };
        let took = answered.saturating_duration_since(sent);
        observe::lease_renewal(outcome, Some((took, slack)));
        match (renewed, sent) {
            (Ok(Some(superseded)), sent) => {
                if !state.extend(sent + state.ttl) {
                    return None;
                }
                if superseded {
                    state.lose(LeaseLoss::Superseded);
                    return None;
                }
                Some(sent + interval)
            }
            (Ok(None), _) => {
                state.lose(LeaseLoss::Refused);
                None
            }
            (Err(e), _) => {
                let now = Instant::now();
                let deadline = state.deadline();
                // Waiting cannot fix a permanent error (a changed table, a missing privilege): it
                // is logged as an error, and retried only until the deadline like any other.
                let level = if e.is_permanent() {
                    log::Level::Error
                } else {
                    log::Level::Warn
                };
                log::log!(
                    target: "pgtenure::leases",
                    level,
                    "renewal of lease {:?} failed ({e}); retrying until its deadline in {:?}",
                    state.key,
                    deadline.saturating_duration_since(now)
                );
                if now >= deadline {
                    state.lose(LeaseLoss::Expired);
                    return None;
                }
                Some(next_retry(now, state.ttl, deadline))
            }
        }
    }
}
