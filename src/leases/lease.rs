//! The managed [`Lease`]: one thread per held lease that renews it and, when the lease is released or
//! dropped, releases its row; loss is sent on a channel.

use std::fmt;
use std::sync::{Arc, Weak};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{at, bounded, select, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use postgres::CancelToken;

use super::family::{Family, Shared};
use super::schedule::{next_retry, renew_interval};
use super::watcher::{Deadline, Timer, Watch};
use crate::db::{discard, Conn, Policy};
use crate::error::{Error, ErrorKind, Result};
use crate::statement::Failure;

/// How long [`Lease::release`] (and dropping a lease) waits in all: for the lease's thread to finish
/// a renewal in progress, for a pool connection, and for the release statement, which the deadline
/// watcher cancels at [`RELEASE_WAIT`].
pub(crate) const RELEASE_BOUND: Duration = Duration::from_secs(5);

/// When the deadline watcher cancels a release statement still running (it can wait on a row lock
/// held by a fenced transaction); the rest of [`RELEASE_BOUND`] lets the cancel land.
const RELEASE_WAIT: Duration = Duration::from_millis(4_500);

/// How long after an outage began (the family's last pool checkout timed out) releases still wait:
/// enough for a free thread to try an idle connection; every release later in the outage waits for
/// nothing, so dropping many leases costs this once, not once each.
const OUTAGE_WAIT: Duration = Duration::from_millis(100);

/// How long releasing a lost lease waits for its thread, which has nothing to release, to stop.
const IDLE_THREAD_WAIT: Duration = Duration::from_millis(100);

/// Why a managed lease was lost; sent once on [`Lease::lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// The local deadline passed without a successful renewal (the database or the network failed or
    /// hung for longer than the lease's slack). The database may still show the row until its own
    /// expiry, which is never earlier.
    Expired,
    /// The database refused a renewal: the row is no longer this tenure's (taken after a lapse,
    /// deleted, released by someone else, or acquired again as a new tenure by this owner).
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

/// A managed lease's state, shared by its handle, its thread and the watcher.
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

    /// Clears this purpose's cancel key after its statement returned: `false` when the watcher took
    /// it meanwhile, so a cancel may still reach the connection's backend (invariant 11 of the
    /// design: that connection must not be used again).
    fn clear_in_flight(&self, purpose: Purpose) -> bool {
        let mut inner = self.inner.lock();
        if inner.in_flight.as_ref().is_some_and(|(p, _)| *p == purpose) {
            inner.in_flight = None;
            true
        } else {
            false
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
}

/// The watcher's view of a lease: when to look at it, and what to do then.
impl Deadline for LeaseState {
    /// When the watcher should look at this lease next.
    fn next_check(&self) -> Instant {
        let inner = self.inner.lock();
        match inner.status {
            Status::Releasing(until) => until,
            _ => inner.deadline,
        }
    }

    /// The watcher's check: expire a lease whose deadline passed, cancel an overrunning release.
    fn on_timer(&self, now: Instant) -> Timer {
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

/// What the handle asks of its lease's thread.
enum Command {
    /// Stop renewing, release the row if it is still this tenure's (`status` is what the lease was
    /// when the release began), and report; wait for a pool connection until `until` at most.
    Release { was: Status, until: Instant },
}

/// What a lease's thread needs: the family, not the [`Leases`](crate::Leases) handle, so that it
/// never keeps the deadline watcher alive (it reaches the watcher through a weak reference).
struct Renewer {
    family: Arc<Family>,
    shared: Weak<Shared>,
}

impl Renewer {
    /// Runs one statement of this lease with its cancel key handed to the watcher; a connection
    /// whose key the watcher took is discarded, since the cancel could land on its next statement.
    fn run_cancellable<T>(
        &self,
        state: &LeaseState,
        purpose: Purpose,
        conn: &mut Conn,
        statement: impl FnOnce(&mut Conn) -> std::result::Result<T, Failure>,
    ) -> std::result::Result<T, Failure> {
        let cancellable = self.family.db.cancels_on_deadline();
        if cancellable {
            state.set_in_flight(purpose, conn.cancel_token());
        }
        let result = statement(conn);
        if cancellable && !state.clear_in_flight(purpose) {
            log::debug!(
                target: "pgtenure::leases",
                "lease {:?}: its statement's cancel key was handed out; discarding the connection",
                state.key
            );
            discard(conn);
        }
        result
    }

    /// One renewal: `Some(superseded)` when still ours, `None` when refused; also the instant before
    /// the renewal that answered was sent.
    fn renew(&self, state: &LeaseState) -> (Result<Option<bool>>, Instant) {
        let mut sent = Instant::now();
        // Waiting for a connection past the deadline cannot save the lease.
        let policy = Policy::IDEMPOTENT.until(state.deadline());
        let rows = self.family.db.with_conn("renew lease", policy, |conn| {
            sent = Instant::now();
            // Prepared first: the cancel key then covers only the renewal itself.
            self.family
                .db
                .prepare(conn, &self.family.sql.renew_tenure)?;
            self.run_cancellable(state, Purpose::Renew, conn, |conn| {
                self.family.db.run(
                    conn,
                    &self.family.sql.renew_tenure,
                    &[
                        &state.key.as_str(),
                        &&*self.family.owner,
                        &state.token,
                        &state.ttl_us,
                    ],
                )
            })
        });
        self.family.note(&rows);
        let outcome = rows.map(|rows| rows.first().map(|row| row.get::<_, bool>(0)));
        (outcome, sent)
    }

    /// Releases the row (guarded by owner and token) if the lease was held or superseded when its
    /// release began.
    fn release(&self, state: &Arc<LeaseState>, was: Status, until: Instant) -> Result<()> {
        if !matches!(was, Status::Held | Status::Lost(LossReason::Superseded)) {
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
                    let statement = self.family.release_statement();
                    // Prepared first: the cancel key then covers only the release itself.
                    self.family.db.prepare(conn, statement)?;
                    self.run_cancellable(state, Purpose::Release, conn, |conn| {
                        self.family
                            .release_with(conn, statement, &state.key, Some(state.token))
                    })
                });
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
    fn run(
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
        match self.renew(state) {
            (Ok(Some(superseded)), sent) => {
                if !state.extend(sent + state.ttl) {
                    return None;
                }
                if superseded {
                    state.lose(LossReason::Superseded);
                    return None;
                }
                Some(sent + interval)
            }
            (Ok(None), _) => {
                state.lose(LossReason::Refused);
                None
            }
            (Err(e), _) => {
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
                    return None;
                }
                Some(next_retry(now, state.ttl, deadline))
            }
        }
    }
}

/// A held lease with a thread of its own.
///
/// It renews every third of its TTL. A renewal that fails with a transient error (connection lost,
/// database restarting) is retried at a shorter interval until the local deadline; a renewal the
/// database refuses is loss at once. Loss is sent once on [`Lease::lost`], and from then on
/// [`Lease::is_held`] is false. The local deadline is taken *before* each grant or renewal is sent,
/// so it never falls after the database's expiry: stop the protected work when it passes.
///
/// Loss is signalled at the local deadline even while the thread is stuck in a blocking call: the
/// [`Leases`](crate::Leases) family's deadline watcher sends it and cancels the stuck statement.
///
/// [`Lease::release`] stops the renewals and releases the row, guarded by owner and token, on the
/// lease's own thread. It returns within 5 s in all: waiting for a renewal in progress, for a pool
/// connection and for the statement (cancelled at 4.5 s) count against it, and when the family's
/// last pool checkout timed out it waits at most until 100 ms after that, so dropping many leases
/// during an outage costs one short wait in all, not one each. A thread still blocked then is left to finish on its
/// own, joined by the deadline watcher. The key is free for the family to acquire again only once
/// the release has completed. Dropping the lease does the same and logs what fails. Dropping the last
/// lease and handle of a family also stops its deadline watcher, which waits at most 2.5 s more for
/// threads still blocked on the database (they then finish on their own).
pub struct Lease {
    state: Arc<LeaseState>,
    shared: Arc<Shared>,
    lost: Receiver<LossReason>,
    commands: Option<Sender<Command>>,
    thread: Option<(JoinHandle<()>, Receiver<Result<()>>)>,
}

impl Lease {
    /// Starts the lease's thread for a tenure granted at `sent` (the instant before the grant).
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
        shared.watch(Watch::Deadline(state.clone()))?;
        let (commands, commands_rx) = bounded::<Command>(1);
        let (reply_tx, reply) = bounded::<Result<()>>(1);
        let renewer = Renewer {
            family: shared.family.clone(),
            shared: Arc::downgrade(&shared),
        };
        let thread_state = state.clone();
        let thread = thread::Builder::new()
            .name("pgtenure-renew".into())
            .spawn(move || renewer.run(thread_state, commands_rx, reply_tx, sent))
            .map_err(|e| {
                state.lose(LossReason::Expired);
                Error::setup("could not start a lease renewal thread").with_source(e)
            })?;
        Ok(Lease {
            state,
            shared,
            lost,
            commands: Some(commands),
            thread: Some((thread, reply)),
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

    /// Stops the renewals and releases the row (guarded by owner and token, so it never frees a
    /// newer tenure); returns within 5 s (see the [type docs](Lease)). After an `Expired` or
    /// `Refused` loss there is nothing to release and it returns `Ok` within 100 ms, even while the
    /// thread is still stuck in a renewal; after `Superseded` it releases, so the contender can
    /// acquire at once.
    ///
    /// # Errors
    ///
    /// A database or connection error from the release statement, or a
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) error when it did not complete within
    /// the bound (it goes on in the background); the row then lapses at its expiry.
    pub fn release(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        let Some(commands) = self.commands.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let outage = self.shared.outage_since();
        let (until, bound) = match outage {
            Some(since) => {
                let end = (since + OUTAGE_WAIT).max(started);
                (end, end - started)
            }
            None => (started + RELEASE_WAIT, RELEASE_BOUND),
        };
        // From here on the lease is not held; the thread sees it before its next renewal.
        let was = self.state.begin_release(until);
        // Lost (expired or refused): nothing to release, so no reason to wait for a thread that may
        // still be stuck in a renewal (no cancel behind a pooler).
        let releases = matches!(was, Status::Held | Status::Lost(LossReason::Superseded));
        let bound = if releases { bound } else { IDLE_THREAD_WAIT };
        // Bounded(1) and the only command ever sent: never blocks.
        let _ = commands.try_send(Command::Release { was, until });
        let Some((thread, reply)) = self.thread.take() else {
            return Ok(());
        };
        match reply.recv_deadline(started + bound) {
            Ok(result) => {
                let _ = thread.join();
                result
            }
            Err(RecvTimeoutError::Disconnected) => {
                // The thread ended without a word (it panicked): nothing is left to release.
                let _ = thread.join();
                self.shared.forget(&self.state.key);
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => {
                // The thread goes on in the background, joined by the watcher; the family may
                // acquire the key again once it has finished.
                let cancel = self.state.take_in_flight(Purpose::Renew);
                let _ = self.shared.watch(Watch::Reap(thread, reply, cancel));
                if !releases {
                    return Ok(());
                }
                log::warn!(
                    target: "pgtenure::leases",
                    "lease {:?}: its thread is blocked on the database; its release goes on in the \
                     background and the key stays held in this family until it completes",
                    self.state.key
                );
                Err(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "release lease {:?} did not complete within {bound:?}{}; the row lapses at \
                         its expiry unless the release still lands",
                        self.state.key,
                        if outage.is_some() {
                            " (the pool had no connection for this family's last statement)"
                        } else {
                            ""
                        }
                    ),
                ))
            }
        }
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
