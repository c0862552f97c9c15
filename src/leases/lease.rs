//! The managed [`Lease`] handle: it starts the lease's thread (`renewer.rs`), shares the lease's
//! state (`state.rs`) with it and the deadline watcher, and asks the thread for the release.

use std::fmt;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::family::WatchedFamily;
use super::renewer::{Command, Renewer};
use super::state::{LeaseLoss, LeaseState, Purpose, Status};
use super::watcher::Watch;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::Fence;

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

/// A held lease with a thread of its own.
///
/// It renews every third of its TTL. A renewal that fails with a transient error (connection lost,
/// database restarting) is retried at a shorter interval until the local deadline; a renewal the
/// database refuses is loss at once. Each renewal takes a connection from the [`Db`](crate::Db)'s
/// pool for one statement: size the pool above what the application holds at once (an
/// application holding every connection starves the renewals, and the lease expires locally
/// although the database would have renewed it). Loss is sent once on [`Lease::lost`], and from then on
/// [`Lease::is_held`] is false. The local deadline is taken *before* each grant or renewal is sent,
/// so it never falls after the database's expiry: stop the protected work when it passes.
///
/// Loss is signalled at the local deadline even while the thread is stuck in a blocking call: the
/// [`Leases`](crate::leases::Leases) family's deadline watcher sends it and cancels the stuck statement.
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
    shared: Arc<WatchedFamily>,
    lost: Receiver<LeaseLoss>,
    commands: Option<Sender<Command>>,
    thread: Option<(JoinHandle<()>, Receiver<Result<()>>)>,
}

impl Lease {
    /// Starts the lease's thread for a tenure granted at `sent` (the instant before the grant).
    pub(crate) fn start(
        shared: Arc<WatchedFamily>,
        key: &str,
        token: i64,
        ttl: Duration,
        ttl_us: i64,
        sent: Instant,
    ) -> Result<Lease> {
        let (loss_tx, lost) = bounded(1);
        let state = Arc::new(LeaseState::new(
            key,
            token,
            ttl,
            ttl_us,
            sent + ttl,
            loss_tx,
        ));
        if let Err(e) = shared.watch(Watch::Deadline(state.clone())) {
            // Nobody will renew it: it lapses at its expiry.
            state.lose(LeaseLoss::Expired);
            return Err(e);
        }
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
                state.lose(LeaseLoss::Expired);
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

    /// The tenure's fencing token: larger than every earlier tenure's of the key. Fence every
    /// protected write with [`Lease::fence`] (which checks it), or stamp it on writes that a
    /// downstream system orders by token.
    pub fn token(&self) -> i64 {
        self.state.token
    }

    /// Checks, inside the caller's transaction, that this tenure (key, owner and token) is live by
    /// `clock_timestamp()`, and locks the lease row `FOR SHARE` until the transaction ends, so no
    /// takeover (another owner's acquire after a lapse, a force release) can commit before it.
    /// Make the protected write only when it returns `true`: after a loss it returns `false`.
    ///
    /// It asks the database, not [`Lease::is_held`]: the database is the judge of the write. The
    /// lock also makes the lease's renewal wait until the transaction ends: keep fenced
    /// transactions well inside the lease's slack (a third of the TTL). For a driver other than
    /// `postgres` (Diesel, psql, Python), run [`Lease::fence_statement`].
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        self.fence_statement().check(tx)
    }

    /// This tenure's fence as a value: the statement and its parameters (key, owner, token), for
    /// any driver to run inside its own transaction ([`crate::fence`]). [`Lease::fence`] runs it.
    pub fn fence_statement(&self) -> Fence {
        self.shared
            .sql
            .fence(&self.state.key, &self.shared.owner, self.state.token)
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
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.state.loss()
    }

    /// The loss channel: yields the [`LeaseLoss`] once when the lease is lost. Releasing the lease
    /// yourself sends nothing. Select on it beside your work (`crossbeam_channel::select!`).
    pub fn lost(&self) -> &Receiver<LeaseLoss> {
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
    /// A database or connection error from the release statement; an
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) error when the statement was still waiting
    /// (for the row, which a transaction holds) at 4.5 s and pgtenure cancelled it, saying so; or a
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) error when it did not complete within
    /// the bound (it goes on in the background). The row then lapses at its expiry.
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
        let releases = matches!(was, Status::Held | Status::Lost(LeaseLoss::Superseded));
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
