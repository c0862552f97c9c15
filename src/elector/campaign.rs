//! Leadership as a loop with events ([`Elector::campaign`]): a thread that polls every retry period
//! and a watcher that signals the loss at the tenure's local deadline, even while a poll hangs.
//!
//! Every decision (elected, lost, who leads) is queued while its decider holds the campaign's state,
//! and delivered in that order, to the events channel and the hooks alike: a loss is never
//! overtaken by a later gain. The channel is bounded ([`EVENTS_CAPACITY`]): when nobody reads it,
//! the oldest events are dropped (counted), never the newest.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{
    at, bounded, never, select, Receiver, RecvTimeoutError, Sender, TrySendError,
};
use parking_lot::Mutex;

use super::poll::Poll;
use super::{CampaignLink, Campaigning, Elector, LeaderInfo};
use crate::busy::Busy;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::Fence;
use crate::observe;

/// How many events [`Leadership::events`] keeps unread; past that, the oldest are dropped (and
/// counted: [`Leadership::dropped_events`]), so a campaign nobody reads the events of holds at most
/// this many.
pub const EVENTS_CAPACITY: usize = 64;

/// What [`Leadership::stop`] waits for the campaign's thread beyond two pool connection timeouts
/// (its poll in progress and its resignation): the statements themselves.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What a campaign tells ([`Leadership::events`], [`LeaderHooks`]), in decision order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaderEvent {
    /// This elector leads, with this term (a fencing token: [`Elector::fence`]).
    Elected {
        /// The tenure's term.
        term: i64,
    },
    /// This elector no longer leads (or may not: see [`LeaderLoss::Expired`]): stop leader-only
    /// work.
    Lost {
        /// The term that ended.
        term: i64,
        /// Why.
        reason: LeaderLoss,
    },
    /// Who leads changed (another member, this one, or nobody), as a poll saw it.
    Observed(Option<LeaderInfo>),
}

/// Why a campaigning elector stopped leading.
///
/// New reasons may be added in minor releases, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaderLoss {
    /// No renewal succeeded before the tenure's local deadline (the database was unreachable or
    /// slow, or this process was paused): another member may lead now. The loss is final: the
    /// campaign resigns that term (should it still be live) and never renews it, so a later win
    /// is a new term and writes fenced by the lost one stay refused.
    Expired,
    /// A renewal found the tenure gone: another member took over (after this one's expiry by the
    /// database clock), or the row was changed from outside.
    Taken,
    /// Another member (or an operator) asked it to step down ([`Elector::request_resign`]), as its
    /// renewal found; it resigns right after this is delivered.
    ResignRequested,
    /// [`Leadership::stop`] (or dropping the handle) ends it; it resigns right after this is
    /// delivered.
    Stopped,
    /// [`Elector::resign`] was called on the campaigning elector (or a clone of it): it resigns
    /// right after this is delivered, stands aside for one TTL, then campaigns again.
    Resigned,
}

impl fmt::Display for LeaderLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaderLoss::Expired => "expired",
            LeaderLoss::Taken => "taken",
            LeaderLoss::ResignRequested => "resign requested",
            LeaderLoss::Stopped => "stopped",
            LeaderLoss::Resigned => "resigned",
        })
    }
}

impl LeaderLoss {
    /// The reason as a metric's label (`expired`, `taken`, `resign_requested`, `stopped`,
    /// `resigned`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            LeaderLoss::Expired => "expired",
            LeaderLoss::Taken => "taken",
            LeaderLoss::ResignRequested => "resign_requested",
            LeaderLoss::Stopped => "stopped",
            LeaderLoss::Resigned => "resigned",
        }
    }
}

/// Callbacks for those who prefer them to [`Leadership::events`]; every method defaults to doing
/// nothing. They run on the campaign's threads (the poller, or the watcher for
/// [`LeaderLoss::Expired`]), or on the thread calling [`Leadership::stop`] (or dropping the handle)
/// for [`LeaderLoss::Stopped`] and [`Elector::resign`] for [`LeaderLoss::Resigned`], outside its locks, one at a time, in the order of the events: a loss
/// always before any later gain. Keep them short; later events wait for them.
pub trait LeaderHooks: Send + Sync {
    /// This elector leads with `term`.
    fn elected(&self, term: i64) {
        let _ = term;
    }
    /// This elector's tenure `term` ended for `reason`.
    fn lost(&self, term: i64, reason: LeaderLoss) {
        let _ = (term, reason);
    }
    /// Who leads changed.
    fn observed(&self, leader: Option<&LeaderInfo>) {
        let _ = leader;
    }
    /// A poll failed (logged too: at `error` when waiting cannot fix it).
    fn error(&self, error: &Error) {
        let _ = error;
    }
}

/// Hooks that do nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLeaderHooks;

impl LeaderHooks for NoLeaderHooks {}

/// A campaign: [`Elector::campaign`]'s thread, owned. Dropping it stops it as [`Leadership::stop`]
/// does, and logs what fails.
pub struct Leadership {
    shared: Arc<Shared>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<Result<()>>>,
    /// Disconnects when the thread ends (the bounded join).
    finished: Receiver<()>,
    events: Receiver<LeaderEvent>,
}

/// What the poller, the watcher and the handle share.
struct Shared {
    elector: Elector,
    hooks: Arc<dyn LeaderHooks>,
    state: Mutex<State>,
    /// Decisions not yet delivered, in decision order.
    queue: Mutex<VecDeque<LeaderEvent>>,
    /// Held while delivering, so deliveries never overlap or reorder.
    delivering: Mutex<()>,
    /// The thread delivering (and so running a hook), if any.
    deliverer: Mutex<Option<ThreadId>>,
    events: Sender<LeaderEvent>,
    /// The channel's other end, to drop the oldest event when it is full.
    oldest: Receiver<LeaderEvent>,
    /// How many events were dropped unread because the channel was full.
    dropped: AtomicU64,
    /// Set (under `state`) by `stop`: nothing more is decided or told; the thread only finishes
    /// its statement and resigns.
    stopped: AtomicBool,
    /// When the poll in progress began: `stop`'s bound counts from there.
    busy: Busy,
}

#[derive(Default)]
struct State {
    /// The term announced `Elected` and not yet `Lost`.
    announced: Option<i64>,
    /// After stepping down on request, it only observes until then, so another member wins.
    observe_until: Option<Instant>,
    /// Who leads, as last told (`Observed`).
    observed: Option<(String, i64)>,
}

impl Elector {
    /// Campaigns for the leadership on a thread of its own (`pgtenure-elector`), owned by the
    /// returned handle: it polls every retry period ([`Elector::with_retry_period`], a third of the
    /// TTL by default), renewing while it leads, and reports what changes on
    /// [`Leadership::events`] (and to hooks: [`Elector::with_hooks`]). A watcher thread
    /// (`pgtenure-elector-watch`) reports [`LeaderLoss::Expired`] at the tenure's local deadline
    /// when no renewal succeeded by then, even while a poll hangs on the database.
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
        let shared = Arc::new(Shared {
            elector: self.clone(),
            hooks: self.hooks.clone(),
            state: Mutex::new(State::default()),
            queue: Mutex::new(VecDeque::new()),
            delivering: Mutex::new(()),
            deliverer: Mutex::new(None),
            events: events_tx,
            oldest: events.clone(),
            dropped: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            busy: Busy::default(),
        });
        // A resign on this elector (or a clone) now goes through the campaign.
        self.tenure.lock().campaign = CampaignLink(Some(
            Arc::downgrade(&shared) as std::sync::Weak<dyn Campaigning>
        ));
        match shared.poll_once() {
            Err(e) if e.is_permanent() => return Err(e),
            _ => {}
        }
        let (stop, stopped) = bounded::<()>(0);
        let (finishing, finished) = bounded::<()>(0);
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pgtenure-elector".into())
                .spawn(move || {
                    // Dropped when the thread ends, also by a panic.
                    let _finishing = finishing;
                    shared.run(&stopped)
                })
                .map_err(|e| Error::setup("could not start the elector thread").with_source(e))?
        };
        Ok(Leadership {
            shared,
            stop: Some(stop),
            thread: Some(thread),
            finished,
            events,
        })
    }
}

impl Shared {
    /// The poller: polls every retry period until stopped, with the watcher beside it; then
    /// steps down.
    fn run(&self, stopped: &Receiver<()>) -> Result<()> {
        let retry = self.elector.retry_period();
        std::thread::scope(|scope| {
            // Dropping `wake` stops the watcher, which the scope joins: also when a hook panics
            // here (the unwinding drops it), or the join would wait forever.
            let (wake, woken) = bounded::<()>(1);
            std::thread::Builder::new()
                .name("pgtenure-elector-watch".into())
                .spawn_scoped(scope, move || self.watch(&woken))
                .map_err(|e| Error::setup("could not start the elector watcher").with_source(e))?;
            let mut next = Instant::now() + retry;
            loop {
                select! {
                    recv(stopped) -> _ => break,
                    recv(at(next)) -> _ => {}
                }
                if self.is_stopped() {
                    break;
                }
                next = Instant::now() + retry;
                let _busy = self.busy.enter();
                // A resignation that failed is sent again before anything else.
                self.finish_resign();
                let observing = self
                    .state
                    .lock()
                    .observe_until
                    .is_some_and(|until| Instant::now() < until);
                if observing {
                    self.observe_once();
                } else {
                    let _ = self.poll_once();
                }
                // The deadline moved (or not): the watcher re-reads it.
                let _ = wake.try_send(());
            }
            drop(wake);
            Ok(())
        })?;
        self.step_down()
    }

    /// One poll, and the events it decides.
    fn poll_once(&self) -> Result<Poll> {
        let polled = self.elector.poll_keeping(true);
        {
            let mut state = self.state.lock();
            match &polled {
                Ok(poll) => {
                    let leading = self.elector.term();
                    match (state.announced, leading) {
                        (None, Some(term)) => self.elected(&mut state, term),
                        (Some(was), Some(term)) if was != term => {
                            self.lost(&mut state, LeaderLoss::Taken);
                            self.elected(&mut state, term);
                        }
                        (Some(_), None) => {
                            let reason = if poll.ended {
                                // Stand aside for a TTL, so that another member wins.
                                state.observe_until = Some(Instant::now() + self.elector.ttl);
                                LeaderLoss::ResignRequested
                            } else if self.elector.tenure.lock().term.is_some() {
                                // Renewed, but the answer came past the local deadline.
                                LeaderLoss::Expired
                            } else {
                                LeaderLoss::Taken
                            };
                            self.lost(&mut state, reason);
                        }
                        _ => {}
                    }
                    self.observed(&mut state, poll.leader.clone());
                }
                Err(e) => {
                    if e.is_permanent() {
                        log::error!(target: "pgtenure::elector", "{} cannot campaign for fleet {:?}: {e}", self.elector.holder, self.elector.name);
                    } else {
                        log::warn!(target: "pgtenure::elector", "{} could not poll fleet {:?}: {e}", self.elector.holder, self.elector.name);
                    }
                }
            }
        }
        if let Err(e) = &polled {
            self.error(e);
        }
        self.flush();
        // Asked to step down: the loss is told (and `is_leading` false) before the resignation
        // frees the leadership for another member.
        self.finish_resign();
        polled
    }

    /// Sends the resignation the elector stood down for, if one waits; a failure is logged and
    /// told to the hooks, and the loop sends it again at its next turn.
    fn finish_resign(&self) {
        if !self.elector.resign_pending() {
            return;
        }
        if let Err(e) = self.elector.finish_resign() {
            log::warn!(target: "pgtenure::elector", "{} could not resign fleet {:?} (it tries again): {e}", self.elector.holder, self.elector.name);
            self.error(&e);
        }
    }

    /// While standing aside: reads who leads, without campaigning.
    fn observe_once(&self) {
        match self.elector.leader() {
            Ok(leader) => {
                let mut state = self.state.lock();
                self.observed(&mut state, leader);
            }
            Err(e) => {
                log::warn!(target: "pgtenure::elector", "{} could not read who leads fleet {:?}: {e}", self.elector.holder, self.elector.name);
                self.error(&e);
            }
        }
        self.flush();
    }

    /// Whether [`Leadership::stop`] was called: nothing is decided or told after it.
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Tells the hooks of a failure, unless stopped (the caller of `stop` gets its error).
    fn error(&self, error: &Error) {
        if !self.is_stopped() {
            self.hooks.error(error);
        }
    }

    fn observed(&self, state: &mut State, leader: Option<LeaderInfo>) {
        if self.is_stopped() {
            return;
        }
        let seen = leader.as_ref().map(|l| (l.holder.clone(), l.term));
        if seen != state.observed {
            state.observed = seen;
            self.queue.lock().push_back(LeaderEvent::Observed(leader));
        }
    }

    /// Reports the loss at the tenure's local deadline if no renewal moved it (re-read after every
    /// wake-up, so none is missed).
    fn watch(&self, woken: &Receiver<()>) {
        loop {
            let deadline = {
                let state = self.state.lock();
                state
                    .announced
                    .and_then(|_| self.elector.tenure.lock().deadline)
            };
            select! {
                recv(woken) -> msg => if msg.is_err() { return },
                recv(deadline.map_or_else(never, at)) -> _ => {
                    {
                        let mut state = self.state.lock();
                        if state.announced.is_some() && self.elector.term().is_none() {
                            self.lost(&mut state, LeaderLoss::Expired);
                        }
                    }
                    self.flush();
                }
            }
        }
    }

    /// Stops believing and reports the loss (`stop`, on the caller's thread, so that a poll stuck
    /// on the database cannot hold it up); nothing is decided or told after it.
    fn stop_believing(&self) {
        {
            let mut state = self.state.lock();
            self.stopped.store(true, Ordering::SeqCst);
            // Under `state`: a decision either came before (and its events are told before the
            // loss) or sees `stopped`.
            self.elector.stand_down();
            if state.announced.is_some() {
                self.lost(&mut state, LeaderLoss::Stopped);
            }
        }
        self.flush_caught();
    }

    /// The loop's end: stops believing in anything a poll in flight at `stop` renewed or won, and
    /// resigns (after the loss was told: `stop` told it before the loop ended).
    fn step_down(&self) -> Result<()> {
        self.stop_believing();
        self.elector.finish_resign()
    }

    fn elected(&self, state: &mut State, term: i64) {
        if self.is_stopped() {
            // Won by a poll in flight when `stop` was called: the loop resigns it.
            return;
        }
        state.announced = Some(term);
        self.queue.lock().push_back(LeaderEvent::Elected { term });
    }

    fn lost(&self, state: &mut State, reason: LeaderLoss) {
        if reason == LeaderLoss::Expired {
            // The loss is final: the term is resigned, never renewed, so a later win is a new
            // term and writes fenced by this one stay refused (work begun under it may still be
            // winding down).
            self.elector.stand_down();
        }
        if let Some(term) = state.announced.take() {
            log::info!(target: "pgtenure::elector", "{} lost the leadership of fleet {:?} (term {term}): {reason}", self.elector.holder, self.elector.name);
            observe::leader_lost(&self.elector.name, reason.label());
            self.queue
                .lock()
                .push_back(LeaderEvent::Lost { term, reason });
        }
    }

    /// Delivers every queued event, in order, to the channel and the hooks.
    fn flush(&self) {
        // The hooks are the application's code, not a database call: not counted in stop's bound.
        let _paused = self.busy.pause();
        let _turn = self.delivering.lock();
        *self.deliverer.lock() = Some(std::thread::current().id());
        loop {
            let Some(event) = self.queue.lock().pop_front() else {
                *self.deliverer.lock() = None;
                return;
            };
            match &event {
                LeaderEvent::Elected { term } => self.hooks.elected(*term),
                LeaderEvent::Lost { term, reason } => self.hooks.lost(*term, *reason),
                LeaderEvent::Observed(leader) => self.hooks.observed(leader.as_ref()),
            }
            self.send(event);
        }
    }

    /// [`Shared::flush`] on a thread that is not the campaign's own (the caller of `stop`, of
    /// `resign`, or a `Drop`): a hook that panics there is logged, not propagated into the caller
    /// (a panic in `Drop` while unwinding would abort). The events after it wait for the next
    /// delivery.
    fn flush_caught(&self) {
        let delivered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.flush()));
        if delivered.is_err() {
            *self.deliverer.lock() = None;
            log::error!(target: "pgtenure::elector", "{}: a campaign hook for fleet {:?} panicked", self.elector.holder, self.elector.name);
        }
    }

    /// Puts `event` on the channel without waiting: when it is full, drops the oldest unread event
    /// to make room, so the newest (the current truth) are the ones kept.
    fn send(&self, mut event: LeaderEvent) {
        loop {
            match self.events.try_send(event) {
                Ok(()) => return,
                Err(TrySendError::Full(again)) => {
                    event = again;
                    // The reader may have taken one meanwhile: then nothing is dropped.
                    if self.oldest.try_recv().is_ok()
                        && self.dropped.fetch_add(1, Ordering::Relaxed) == 0
                    {
                        log::warn!(target: "pgtenure::elector", "{}: nobody reads the campaign's events for fleet {:?}; dropping the oldest (is_leading() and term() stay exact)", self.elector.holder, self.elector.name);
                    }
                }
                // Only `Shared` itself keeps a receiver then: cannot happen, and nobody listens.
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

impl Campaigning for Shared {
    /// [`Elector::resign`] on the campaigning elector: stops believing, tells the loss, and only
    /// then resigns; stands aside for a TTL so that another member wins.
    fn resign(&self) -> Result<()> {
        let believed = self.elector.stand_down();
        {
            let mut state = self.state.lock();
            if believed || state.announced.is_some() {
                state.observe_until = Some(Instant::now() + self.elector.ttl);
            }
            self.lost(&mut state, LeaderLoss::Resigned);
        }
        if *self.deliverer.lock() == Some(std::thread::current().id()) {
            // Called from a hook: the `Lost` is delivered once the hook returns, and the loop
            // sends the resignation after it (`poll_once` and every turn do).
            return Ok(());
        }
        self.flush_caught();
        self.elector.finish_resign()
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
        let state = self.shared.state.lock();
        state
            .announced
            .filter(|term| self.shared.elector.term() == Some(*term))
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
        self.shared.dropped.load(Ordering::Relaxed)
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
            .map(|term| self.shared.elector.fence_statement(term))
    }

    /// The elector campaigning (for [`Elector::fence`], [`Elector::leader`]).
    pub fn elector(&self) -> &Elector {
        &self.shared.elector
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
        self.shared
            .elector
            .db
            .pool_timeout()
            .saturating_mul(2)
            .saturating_add(STOP_GRACE)
    }

    fn shut_down(&mut self) -> Result<()> {
        // Here, not on the loop's thread, which may be stuck in a poll.
        self.shared.stop_believing();
        drop(self.stop.take());
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        let bound = self.stop_bound();
        // Counted from the start of the poll in progress: dropping many campaigns whose polls
        // hang on one outage takes one bound, not one each.
        match self.finished.recv_timeout(self.shared.busy.wait(bound)) {
            Err(RecvTimeoutError::Disconnected) => thread.join().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Setup,
                    "the elector thread panicked (a hook panicked?)",
                ))
            }),
            _ => {
                log::error!(target: "pgtenure::elector", "{}: the campaign for fleet {:?} did not stop within {bound:?} (a statement stuck on the database); leaving its thread to end on its own: it resigns once the statement returns", self.shared.elector.holder, self.shared.elector.name);
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
            log::warn!(target: "pgtenure::elector", "{}: stopping the campaign on drop: {e}", self.shared.elector.holder);
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("holder", &self.shared.elector.holder)
            .field("name", &self.shared.elector.name)
            .field("term", &self.term())
            .finish()
    }
}
