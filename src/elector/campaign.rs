//! Leadership as a loop with events ([`Elector::campaign`]): the handle, [`Leadership`], that owns
//! the campaign's thread, stops it, and answers whether it leads. What the loop decides and tells is
//! [`Campaign`]'s (`campaigner.rs`); the events are in `events.rs`.

use std::fmt;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use super::campaigner::Campaign;
#[cfg(doc)]
use super::events::LeaderLoss;
use super::events::EVENTS_CAPACITY;
use super::{CampaignLink, Campaigning, Elector, LeaderEvent};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::Fence;

/// What [`Leadership::stop`] waits for the campaign's thread beyond two pool connection timeouts
/// (its poll in progress and its resignation): the statements themselves.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A campaign: [`Elector::campaign`]'s thread, owned. Dropping it stops it as [`Leadership::stop`]
/// does, and logs what fails.
pub struct Leadership {
    campaign: Arc<Campaign>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Result<()>>>,
    /// Disconnects when the thread ends (the bounded join).
    finished: Receiver<()>,
    events: Receiver<LeaderEvent>,
}

impl Elector {
    /// Campaigns for the leadership on a thread of its own (`pgtenure-elector`), owned by the
    /// returned handle: it polls every retry period ([`Elector::with_retry_period`], a third of the
    /// TTL by default), renewing while it leads, and reports what changes on
    /// [`Leadership::events`] (and to hooks: [`Elector::with_hooks`]). A resignation or a `stop`
    /// elsewhere in the fleet wakes its next poll at once when the `Db` has handover notifications
    /// on ([`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications)). A watcher thread
    /// (`pgtenure-elector-watch`) reports [`LeaderLoss::Expired`] at the tenure's local deadline
    /// when no renewal succeeded by then, even while a poll hangs on the database. Each poll waits
    /// for a pool connection until the next turn at most. Back from an outage (its statements
    /// failed for want of the database), a campaign that did not lead before it only observes for
    /// one retry period after its first answer, so that the leader, re-taking its lapsed tenure at
    /// its first poll, stays the leader (see the [module docs](super)).
    ///
    /// The first poll runs here, on the calling thread: an error that waiting cannot fix (a missing
    /// table, a missing privilege) is returned at once; a connection error is retried by the loop.
    /// [`Elector::is_leader`] keeps working beside it for callers with a loop of their own (not on
    /// the same elector or its clones, which share the tenure).
    ///
    /// A service resigns on SIGTERM or SIGINT, so that another member is elected at once rather
    /// than after the TTL: it waits for the signal on its main thread (with a signal crate such as
    /// `signal-hook`: no `unsafe`, no `sigwait`), then stops the campaign:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use signal_hook::consts::{SIGINT, SIGTERM};
    /// use signal_hook::iterator::Signals;
    ///
    /// // Before the campaign starts: the signals are caught from here on.
    /// let mut signals = Signals::new([SIGTERM, SIGINT])?;
    /// let db = pgtenure::Db::from_env()?;
    /// let leadership = pgtenure::elector::Elector::new(&db).with_name("reports")?.campaign()?;
    /// signals.forever().next(); // until SIGTERM or SIGINT
    /// leadership.stop()?; // resigns when leading
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`], before anything is sent, when the retry period
    /// ([`Elector::with_retry_period`]) is not below the TTL ([`Elector::with_ttl`]); the first
    /// poll's error when waiting cannot fix it; [`ErrorKind::Setup`] when a thread cannot be
    /// started.
    pub fn campaign(&self) -> Result<Leadership> {
        super::check_retry(self.retry, self.ttl)?;
        let (events_tx, events) = bounded(EVENTS_CAPACITY);
        let campaign = Arc::new(Campaign::new(self, events_tx, events.clone()));
        // A resign on this elector (or a clone) now goes through the campaign.
        self.tenure.lock().campaign = CampaignLink(Some(
            Arc::downgrade(&campaign) as std::sync::Weak<dyn Campaigning>
        ));
        match campaign.poll_once() {
            Err(e) if e.is_permanent() => return Err(e),
            _ => {}
        }
        let (stop, stopped) = bounded::<()>(0);
        let (finishing, finished) = bounded::<()>(0);
        let thread = {
            let campaign = Arc::clone(&campaign);
            std::thread::Builder::new()
                .name("pgtenure-elector".into())
                .spawn(move || {
                    // Dropped when the thread ends, also by a panic.
                    let _finishing = finishing;
                    campaign.run(&stopped)
                })
                .map_err(|e| Error::setup("could not start the elector thread").with_source(e))?
        };
        Ok(Leadership {
            campaign,
            stop: Some(stop),
            thread: Some(thread),
            finished,
            events,
        })
    }
}

impl Leadership {
    /// Whether this elector leads now: between its `Elected` and its `Lost`, and never past the
    /// tenure's local deadline (read from the clock, without a database call).
    pub fn is_leading(&self) -> bool {
        self.term().is_some()
    }

    /// The term while leading, else `None`.
    pub fn term(&self) -> Option<i64> {
        self.campaign.term()
    }

    /// The campaign's events, in decision order. The channel is bounded ([`EVENTS_CAPACITY`]):
    /// when that many are unread, the oldest is dropped for each new one, so a campaign whose
    /// events nobody reads (an application that follows [`Leadership::is_leading`] or hooks) keeps
    /// no more than that, and a reader that falls behind still finds the latest events, the current
    /// truth, last. A reader that keeps up (fewer than [`EVENTS_CAPACITY`] unread at any time; each
    /// hand-over is a few events, at most one poll apart) sees every event, in order;
    /// [`Leadership::dropped_events`] counts what was dropped. Hooks get every event regardless.
    pub fn events(&self) -> &Receiver<LeaderEvent> {
        &self.events
    }

    /// How many events were dropped from [`Leadership::events`] because [`EVENTS_CAPACITY`] were
    /// unread (the oldest first). When it is not zero, the events read skip some: a `Lost` may come
    /// without its `Elected`; [`Leadership::term`] is the truth.
    pub fn dropped_events(&self) -> u64 {
        self.campaign.dropped_events()
    }

    /// Checks, inside the caller's transaction, that the term this campaign leads with now is live
    /// by `clock_timestamp()`, and locks the leader row `FOR SHARE` until the transaction ends, so
    /// no new election can commit before it. Make a leader-only write only when it returns `true`;
    /// `false` without a statement when not leading.
    ///
    /// It fences the current term. Work begun under a term that must not write under a later one
    /// (lost, then elected again) takes [`Leadership::fence_statement`] when it begins and runs that
    /// value: it stays pinned to its term.
    ///
    /// # Errors
    ///
    /// A database or connection error (the transaction is then aborted).
    pub fn fence(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        match self.fence_statement() {
            Some(fence) => fence.check(tx),
            None => Ok(false),
        }
    }

    /// The fence of the term this campaign leads with now, as a value (fleet name, holder, term)
    /// for any driver to run inside its own transaction ([`crate::fence`]); `None` when not
    /// leading. The value is pinned to that term.
    pub fn fence_statement(&self) -> Option<Fence> {
        self.term()
            .map(|term| self.campaign.elector().fence_statement(term))
    }

    /// The elector campaigning (for [`Elector::fence`], [`Elector::leader`]).
    pub fn elector(&self) -> &Elector {
        self.campaign.elector()
    }

    /// Whether the campaign's thread has ended on its own (it does not, short of a panic in a
    /// hook).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Stops campaigning: at once, on the calling thread, turns [`Leadership::is_leading`] false
    /// and, if leading, delivers [`LeaderLoss::Stopped`] (the last event: nothing is decided or
    /// told after it); then ends the loop after the poll in progress, which resigns (the next poll
    /// elsewhere wins at once, never while this handle still leads), and joins its threads.
    ///
    /// Bounded: it waits for the loop's thread at most twice the pool's connection timeout (10 s by
    /// default; one poll in progress and the resignation, each waiting for a connection) plus 2 s
    /// (their statements), counted from the start of the poll in progress if there is one (so
    /// stopping or dropping many campaigns whose polls hang on one outage takes one bound, not
    /// one each). A thread not done by then (a poll stuck on a database that does not
    /// answer: a blackholed network, a hung server or pooler) is left to end on its own, and `stop`
    /// returns an [`ErrorKind::Connection`] error. That thread tells nothing more and never polls
    /// again: once its statement returns (the TCP timeouts, see [`Db`](crate::Db), or the network
    /// coming back), it resigns whatever that statement renewed or won (guarded by holder and
    /// term, so never a newer tenure), and ends; should it never return, the tenure expires at its
    /// TTL.
    ///
    /// Called from one of the campaign's own hooks (on its thread), it waits for nothing: the
    /// [`LeaderLoss::Stopped`] event follows once the hook returns, and the loop then resigns and
    /// ends on its own (should that resignation fail, the tenure expires at its TTL); `stop`
    /// returns `Ok`.
    ///
    /// # Errors
    ///
    /// The resignation's error. The elector keeps the term: [`Elector::resign`] on it (or a clone)
    /// sends the resignation again; otherwise the tenure expires at its TTL. An
    /// [`ErrorKind::Connection`] error when the thread was not done within the bound above.
    pub fn stop(mut self) -> Result<()> {
        self.shut_down()
    }

    /// How long `stop` waits for the loop's thread.
    fn stop_bound(&self) -> Duration {
        self.campaign
            .elector()
            .db
            .pool_timeout()
            .saturating_mul(2)
            .saturating_add(STOP_GRACE)
    }

    fn shut_down(&mut self) -> Result<()> {
        // Here, not on the loop's thread, which may be stuck in a poll.
        self.campaign.stop_believing();
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        if thread.thread().id() == std::thread::current().id() || self.campaign.is_delivering_here()
        {
            // Called from one of its own hooks, on the loop's thread (waiting for it would wait
            // for this very call) or on a thread delivering its events (the `Lost` of a `resign`
            // or a `stop` called there: the loop waits for that delivery to end before it tells
            // anything more, its own way out included). The loop ends (resigning) once the hook
            // returns.
            return Ok(());
        }
        let bound = self.stop_bound();
        // Counted from the start of the poll in progress: dropping many campaigns whose polls
        // hang on one outage takes one bound, not one each.
        match self.finished.recv_timeout(self.campaign.stop_wait(bound)) {
            Err(RecvTimeoutError::Disconnected) => thread.join().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Setup,
                    "the elector thread panicked (a hook panicked?)",
                ))
            }),
            _ => {
                log::error!(target: "pgtenure::elector", "{}: the campaign for fleet {:?} did not stop within {bound:?} (a statement stuck on the database); leaving its thread to end on its own: it resigns once the statement returns", self.campaign.elector().holder, self.campaign.elector().name);
                Err(Error::new(
                    ErrorKind::Connection,
                    format!(
                        "the campaign did not stop within {bound:?}: its poll is stuck on the \
                         database; its thread resigns once that returns, else the tenure \
                         expires at its TTL"
                    ),
                ))
            }
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.thread.is_none() {
            return;
        }
        if let Err(e) = self.shut_down() {
            log::warn!(target: "pgtenure::elector", "{}: stopping the campaign on drop: {e}", self.campaign.elector().holder);
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("holder", &self.campaign.elector().holder)
            .field("name", &self.campaign.elector().name)
            .field("term", &self.term())
            .finish()
    }
}
