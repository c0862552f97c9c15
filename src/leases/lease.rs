//! The managed [`Lease`]: one renewal thread per held lease, loss sent on a channel.

use std::fmt;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, bounded, select, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use postgres::types::Type;
use postgres::CancelToken;

use super::schedule::{next_retry, renew_interval};
use super::watcher::Watch;
use super::{Shared, Statements};
use crate::db::Db;
use crate::error::{Error, Result};

/// How long releasing (or dropping) a lease waits for its renewal thread to stop; a thread still
/// blocked then has its statement cancelled and is joined later by the deadline watcher.
const JOIN_WAIT: Duration = Duration::from_secs(1);

/// How long the release statement of a [`Lease`] may run before the watcher cancels it (it can wait
/// on a row lock held by a fenced transaction).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Why a managed lease was lost; sent once on [`Lease::lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline passed without a successful renewal (the database or the network failed or
    /// hung for longer than the lease's slack). The database may still show the row until its own
    /// expiry, which is never earlier.
    Expired,
    /// The database refused a renewal: the row is no longer this tenure's (taken after a lapse,
    /// deleted, or released by someone else).
    Refused,
    /// A contender asked for the key ([`Leases::supersede`](crate::Leases::supersede)). The row is
    /// still held; stop the work and release, and the contender acquires it.
    Superseded,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "expired: no renewal succeeded before the local deadline",
            LossReason::Refused => "refused: the database says the lease is no longer ours",
            LossReason::Superseded => "superseded: a contender asked for the key",
        })
    }
}

/// Which statement a lease has in flight (each clears only its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Renew,
    Release,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Held,
    Lost(LossReason),
    /// Being released by its owner; the release statement may run until the instant.
    Releasing(Instant),
    Released,
}

struct Inner {
    status: Status,
    deadline: Instant,
    in_flight: Option<(Purpose, CancelToken)>,
}

/// What the watcher should do with a lease whose check time came.
pub(crate) enum Timer {
    /// Nothing more to watch.
    Done,
    /// Check again then.
    Again(Instant),
    /// Cancel this statement (the lease just expired, or its release overran).
    Cancel(Option<CancelToken>),
}

/// A managed lease's state, shared by its handle, its renewal thread and the watcher.
pub(crate) struct LeaseState {
    key: String,
    token: i64,
    ttl: Duration,
    ttl_us: i64,
    inner: Mutex<Inner>,
    loss: Sender<LossReason>,
}

impl LeaseState {
    fn is_held(&self) -> bool {
        let inner = self.inner.lock();
        inner.status == Status::Held && Instant::now() < inner.deadline
    }

    fn deadline(&self) -> Instant {
        self.inner.lock().deadline
    }

    fn loss(&self) -> Option<LossReason> {
        match self.inner.lock().status {
            Status::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// Marks the lease lost (once, only while held) and sends the reason.
    fn lose(&self, reason: LossReason) -> bool {
        {
            let mut inner = self.inner.lock();
            if inner.status != Status::Held {
                return false;
            }
            inner.status = Status::Lost(reason);
        }
        log::info!(target: "pgtenure::leases", "lease {:?} (token {}) lost: {reason}", self.key, self.token);
        // Bounded(1) and sent once: never blocks; a dropped receiver means nobody listens.
        let _ = self.loss.try_send(reason);
        true
    }

    /// Moves the local deadline to `deadline` after a successful renewal, unless no longer held.
    fn extend(&self, deadline: Instant) -> bool {
        let mut inner = self.inner.lock();
        if inner.status != Status::Held {
            return false;
        }
        inner.deadline = inner.deadline.max(deadline);
        true
    }

    fn set_in_flight(&self, purpose: Purpose, token: CancelToken) {
        self.inner.lock().in_flight = Some((purpose, token));
    }

    fn clear_in_flight(&self, purpose: Purpose) {
        let mut inner = self.inner.lock();
        if inner.in_flight.as_ref().is_some_and(|(p, _)| *p == purpose) {
            inner.in_flight = None;
        }
    }

    fn take_in_flight(&self, purpose: Purpose) -> Option<CancelToken> {
        let mut inner = self.inner.lock();
        match inner.in_flight.take() {
            Some((p, token)) if p == purpose => Some(token),
            other => {
                inner.in_flight = other;
                None
            }
        }
    }

    /// Starts the owner's release; returns the status it had.
    fn begin_release(&self, until: Instant) -> Status {
        let mut inner = self.inner.lock();
        let was = inner.status;
        inner.status = Status::Releasing(until);
        was
    }

    fn end_release(&self) {
        self.inner.lock().status = Status::Released;
    }

    /// When the watcher should look at this lease next.
    pub(crate) fn next_check(&self) -> Instant {
        let inner = self.inner.lock();
        match inner.status {
            Status::Releasing(until) => until,
            _ => inner.deadline,
        }
    }

    /// The watcher's check: expire a lease whose deadline passed, cancel an overrunning release.
    pub(crate) fn on_timer(&self, now: Instant) -> Timer {
        let status = self.inner.lock().status;
        match status {
            Status::Held => {
                let deadline = self.deadline();
                if deadline > now {
                    Timer::Again(deadline)
                } else if self.lose(LossReason::Expired) {
                    Timer::Cancel(self.take_in_flight(Purpose::Renew))
                } else {
                    Timer::Done
                }
            }
            Status::Releasing(until) if until > now => Timer::Again(until),
            Status::Releasing(_) => Timer::Cancel(self.take_in_flight(Purpose::Release)),
            Status::Lost(_) | Status::Released => Timer::Done,
        }
    }
}

/// What a renewal thread needs: no reference to the [`Leases`](crate::Leases) handle, so that it
/// never keeps the watcher alive.
struct Renewer {
    db: Db,
    owner: Arc<str>,
    sql: Arc<Statements>,
}

impl Renewer {
    /// One renewal: `Some(superseded)` when still ours, `None` when refused.
    fn renew(&self, state: &LeaseState) -> Result<Option<bool>> {
        let cancel = self.db.cancels_on_deadline();
        let rows = self.db.with_conn("renew lease", |conn| {
            if cancel {
                state.set_in_flight(Purpose::Renew, conn.cancel_token());
            }
            let rows = conn.query_typed(
                &self.sql.renew_tenure,
                &[
                    (&state.key.as_str(), Type::TEXT),
                    (&&*self.owner, Type::TEXT),
                    (&state.token, Type::INT8),
                    (&state.ttl_us, Type::INT8),
                ],
            );
            state.clear_in_flight(Purpose::Renew);
            rows
        })?;
        Ok(rows.first().map(|row| row.get::<_, bool>(0)))
    }

    /// The renewal thread's loop: renew every third of the TTL, retry transient failures until the
    /// local deadline, stop on loss or when `stop` disconnects.
    fn run(self, state: Arc<LeaseState>, stop: Receiver<()>, first: Instant) {
        let interval = renew_interval(state.ttl);
        let mut next = first + interval;
        loop {
            select! {
                recv(stop) -> _ => return,
                recv(at(next)) -> _ => {}
            }
            if !state.is_held() {
                // Expired (the watcher sends the loss) or being released.
                return;
            }
            let sent = Instant::now();
            match self.renew(&state) {
                Ok(Some(superseded)) => {
                    if !state.extend(sent + state.ttl) {
                        return;
                    }
                    if superseded {
                        state.lose(LossReason::Superseded);
                        return;
                    }
                    next = sent + interval;
                }
                Ok(None) => {
                    state.lose(LossReason::Refused);
                    return;
                }
                Err(e) => {
                    let now = Instant::now();
                    let deadline = state.deadline();
                    log::warn!(
                        target: "pgtenure::leases",
                        "renewal of lease {:?} failed ({e}); retrying until its deadline in {:?}",
                        state.key,
                        deadline.saturating_duration_since(now)
                    );
                    if now >= deadline {
                        state.lose(LossReason::Expired);
                        return;
                    }
                    next = next_retry(now, state.ttl, deadline);
                }
            }
        }
    }
}

/// A held lease with a renewal thread of its own.
///
/// It renews every third of its TTL. A renewal that fails with a transient error (connection lost,
/// database restarting) is retried at a shorter interval until the local deadline; a renewal the
/// database refuses is loss at once. Loss is sent once on [`Lease::lost`], and from then on
/// [`Lease::is_held`] is false. The local deadline is taken *before* each grant or renewal is sent,
/// so it never falls after the database's expiry: stop the protected work when it passes.
///
/// Loss is signalled at the local deadline even while the renewal thread is stuck in a blocking
/// call: the [`Leases`](crate::Leases) family's deadline watcher sends it and cancels the stuck
/// statement.
///
/// [`Lease::release`] stops and joins the renewal thread and releases the row, guarded by owner and
/// token. Dropping the lease does the same and logs what fails; it blocks at most 1 s for the thread
/// (a thread still stuck then has its statement cancelled and is joined by the watcher) and 5 s for
/// the release statement (cancelled after that).
pub struct Lease {
    state: Arc<LeaseState>,
    shared: Arc<Shared>,
    lost: Receiver<LossReason>,
    stop: Option<Sender<()>>,
    renewer: Option<(JoinHandle<()>, Receiver<()>)>,
}

impl Lease {
    /// Starts the renewal thread for a tenure granted at `sent` (the instant before the grant).
    pub(super) fn start(
        shared: Arc<Shared>,
        key: &str,
        token: i64,
        ttl: Duration,
        ttl_us: i64,
        sent: Instant,
    ) -> Result<Lease> {
        let (loss_tx, lost) = bounded(1);
        let state = Arc::new(LeaseState {
            key: key.to_owned(),
            token,
            ttl,
            ttl_us,
            inner: Mutex::new(Inner {
                status: Status::Held,
                deadline: sent + ttl,
                in_flight: None,
            }),
            loss: loss_tx,
        });
        shared.watch(Watch::Lease(state.clone()))?;
        let (stop, stop_rx) = bounded::<()>(0);
        let (done_tx, done) = bounded::<()>(0);
        let renewer = Renewer {
            db: shared.db.clone(),
            owner: shared.owner.clone(),
            sql: shared.sql.clone(),
        };
        let thread_state = state.clone();
        let thread = thread::Builder::new()
            .name("pgtenure-renew".into())
            .spawn(move || {
                renewer.run(thread_state, stop_rx, sent);
                drop(done_tx);
            })
            .map_err(|e| Error::setup("could not start a lease renewal thread").with_source(e))?;
        Ok(Lease {
            state,
            shared,
            lost,
            stop: Some(stop),
            renewer: Some((thread, done)),
        })
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.state.key
    }

    /// The tenure's fencing token: larger than every earlier tenure's of the key. Pass it to
    /// [`Leases::fence`](crate::Leases::fence) inside the transaction of every protected write.
    pub fn token(&self) -> i64 {
        self.state.token
    }

    /// The TTL the lease renews with.
    pub fn ttl(&self) -> Duration {
        self.state.ttl
    }

    /// The local deadline: the lease is held until then at least by the database's clock, and moves
    /// forward with every successful renewal.
    pub fn deadline(&self) -> Instant {
        self.state.deadline()
    }

    /// True while the lease is held: not lost, not released, and the local deadline not passed
    /// (checked against the clock on every call, so it turns false at the deadline even if every
    /// thread is stuck).
    pub fn is_held(&self) -> bool {
        self.state.is_held()
    }

    /// Why the lease was lost, once it was.
    pub fn loss(&self) -> Option<LossReason> {
        self.state.loss()
    }

    /// The loss channel: yields the [`LossReason`] once when the lease is lost. Releasing the lease
    /// yourself sends nothing. Select on it beside your work (`crossbeam_channel::select!`).
    pub fn lost(&self) -> &Receiver<LossReason> {
        &self.lost
    }

    /// Stops the renewal thread and releases the row (guarded by owner and token, so it never frees a
    /// newer tenure). After an `Expired` or `Refused` loss there is nothing to release and it
    /// returns `Ok`; after `Superseded` it releases, so the contender can acquire at once.
    ///
    /// # Errors
    ///
    /// A database or connection error from the release statement; the row then lapses at its expiry.
    pub fn release(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        let Some(stop) = self.stop.take() else {
            return Ok(());
        };
        let was = self.state.begin_release(Instant::now() + RELEASE_WAIT);
        drop(stop);
        if let Some((thread, done)) = self.renewer.take() {
            let finished = matches!(
                done.recv_timeout(JOIN_WAIT),
                Err(RecvTimeoutError::Disconnected)
            );
            if finished {
                let _ = thread.join();
            } else {
                let cancel = self.state.take_in_flight(Purpose::Renew);
                log::warn!(
                    target: "pgtenure::leases",
                    "renewal thread of lease {:?} is blocked on the database; cancelling it",
                    self.state.key
                );
                let _ = self.shared.watch(Watch::Reap(thread, cancel));
            }
        }
        self.shared.forget(&self.state.key);
        let result = match was {
            Status::Held | Status::Lost(LossReason::Superseded) => self.release_row(),
            _ => Ok(()),
        };
        self.state.end_release();
        result
    }

    fn release_row(&self) -> Result<()> {
        // The watcher cancels the statement if it overruns RELEASE_WAIT (a row lock held elsewhere).
        self.shared.watch(Watch::Lease(self.state.clone()))?;
        let cancel = self.shared.db.cancels_on_deadline();
        let released = self.shared.db.with_conn("release lease", |conn| {
            if cancel {
                self.state
                    .set_in_flight(Purpose::Release, conn.cancel_token());
            }
            let released =
                self.shared
                    .release_statement(conn, &self.state.key, Some(self.state.token));
            self.state.clear_in_flight(Purpose::Release);
            released
        })?;
        if !released {
            log::debug!(
                target: "pgtenure::leases",
                "release of lease {:?} token {}: it had already lapsed",
                self.state.key,
                self.state.token
            );
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            log::warn!(
                target: "pgtenure::leases",
                "dropping lease {:?}: release failed, it lapses at its expiry: {e}",
                self.state.key
            );
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.state.key)
            .field("token", &self.state.token)
            .field("ttl", &self.state.ttl)
            .field("held", &self.is_held())
            .field("loss", &self.loss())
            .finish()
    }
}
