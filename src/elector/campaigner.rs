//! A campaign's loop ([`Elector::campaign`]): a thread that polls every retry period and a watcher
//! that signals the loss at the tenure's local deadline, even while a poll hangs; what they decide,
//! and how it is told.
//!
//! Every decision (elected, lost, who leads) is queued while its decider holds the campaign's state,
//! and delivered in that order ([`InOrder`]), to the events channel and the hooks alike: a loss is
//! never overtaken by a later gain. The channel is bounded
//! ([`EVENTS_CAPACITY`](super::EVENTS_CAPACITY)): when nobody reads it, the oldest events are
//! dropped (counted), never the newest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{at, bounded, never, select, Receiver, Sender, TrySendError};
use parking_lot::Mutex;

use super::events::{LeaderEvent, LeaderHooks, LeaderLoss};
use super::poll::Poll;
use super::{Campaigning, Elector, LeaderInfo};
use crate::busy::Busy;
use crate::deliver::InOrder;
use crate::error::{Error, Result};
use crate::observe;
use crate::outage::Reach;

/// A running campaign: what its poller, its watcher and its handle
/// ([`Leadership`](super::Leadership)) share.
pub(super) struct Campaign {
    elector: Elector,
    hooks: Arc<dyn LeaderHooks>,
    state: Mutex<CampaignState>,
    /// Decisions not yet delivered, in decision order; its delivering thread is the one running a
    /// hook, if any.
    to_tell: InOrder<LeaderEvent>,
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

/// What the campaign decided: kept under one lock, so decisions queue in the order they are made.
#[derive(Default)]
struct CampaignState {
    /// The term announced `Elected` and not yet `Lost`.
    announced: Option<i64>,
    /// After stepping down on request, it only observes until then, so another member wins.
    observe_until: Option<Instant>,
    /// Who leads, as last told (`Observed`).
    observed: Option<(String, i64)>,
    /// Whether its statements reach the database: back from an outage, a member that did not lead
    /// before it only observes for one retry period (see [`Campaign::defers`]).
    reach: Reach,
}

impl Campaign {
    /// A campaign of `elector`, telling its events on `events` (whose other end, `oldest`, drops
    /// the oldest unread event when the channel is full) and to the elector's hooks.
    pub(super) fn new(
        elector: &Elector,
        events: Sender<LeaderEvent>,
        oldest: Receiver<LeaderEvent>,
    ) -> Campaign {
        Campaign {
            elector: elector.clone(),
            hooks: elector.hooks.clone(),
            state: Mutex::new(CampaignState::default()),
            to_tell: InOrder::default(),
            events,
            oldest,
            dropped: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
            busy: Busy::default(),
        }
    }

    /// The elector campaigning.
    pub(super) fn elector(&self) -> &Elector {
        &self.elector
    }

    /// The term while leading: announced `Elected`, not yet `Lost`, and live by the local deadline.
    pub(super) fn term(&self) -> Option<i64> {
        let state = self.state.lock();
        state
            .announced
            .filter(|term| self.elector.term() == Some(*term))
    }

    /// Whether the calling thread is delivering this campaign's events (running one of its hooks).
    pub(super) fn is_delivering_here(&self) -> bool {
        self.to_tell.is_delivering_here()
    }

    /// How many events were dropped unread because the channel was full.
    pub(super) fn dropped_events(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// How long a stop asked now waits for the loop: `bound`, counted from the start of the poll
    /// in progress if there is one.
    pub(super) fn stop_wait(&self, bound: Duration) -> Duration {
        self.busy.wait(bound)
    }

    /// The poller: polls every retry period until stopped, with the watcher beside it; then
    /// steps down.
    pub(super) fn run(&self, stopped: &Receiver<()>) -> Result<()> {
        let retry = self.elector.retry_period();
        std::thread::scope(|scope| {
            // Dropping `wake` stops the watcher, which the scope joins: also when a hook panics
            // here (the unwinding drops it), or the join would wait forever.
            let (wake, woken) = bounded::<()>(1);
            std::thread::Builder::new()
                .name("pgtenure-elector-watch".into())
                .spawn_scoped(scope, move || self.watch(&woken))
                .map_err(|e| Error::setup("could not start the elector watcher").with_source(e))?;
            // A resignation or a stop elsewhere in the fleet wakes the next poll at once, with
            // handover notifications on; the poll decides, as ever.
            let freed = self.elector.watch_resigned();
            let mut next = Instant::now() + retry;
            loop {
                select! {
                    recv(stopped) -> _ => break,
                    recv(at(next)) -> _ => {}
                    recv(freed.receiver()) -> _ => {}
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
                } else if self.defers().is_some() {
                    self.observe_once();
                    // The first poll comes as the deferral ends (one retry period after the first
                    // answer), not a turn later: a real crash delays the take-over by one period.
                    if let Some(until) = self.defers() {
                        next = next.max(until);
                    }
                } else if let Ok(Poll {
                    held_off: Some(opens),
                    ..
                }) = self.poll_once()
                {
                    // Held off after a promotion: the poll that may win goes as the gate opens for
                    // this member (the last leader before the others: see is_leader.sql). Capped
                    // at a turn: `next` is no later, and an absurd answer cannot overflow.
                    next = next.min(Instant::now() + opens.min(retry));
                }
                // The deadline moved (or not): the watcher re-reads it.
                let _ = wake.try_send(());
            }
            drop(wake);
            Ok(())
        })?;
        self.step_down()
    }

    /// Whether this turn only observes because the campaign is back from an outage (its statements
    /// failed for want of the database) for less than one retry period after its first answer,
    /// and it was not the leader it last saw: the leader, who re-takes its lapsed tenure at its
    /// first poll, reaches the database within that period. A campaign that saw no failure (the
    /// leader really crashed) polls, and takes over at expiry. Observing only delays a take-over:
    /// the deferral is local, and never extends anybody's belief.
    /// Until when, `None` when it does not (the instant now while still cut off).
    fn defers(&self) -> Option<Instant> {
        let mut state = self.state.lock();
        let holder = &self.elector.holder;
        let led = (state.observed.as_ref()).is_some_and(|(leader, _)| leader.as_str() == &**holder);
        let until = state.reach.defers(Instant::now());
        if let (false, Some(until)) = (led, until) {
            log::debug!(target: "pgtenure::elector", "{holder}: back from an outage, only observing fleet {:?} for {:?}", self.elector.name, until.saturating_duration_since(Instant::now()));
            return Some(until);
        }
        None
    }

    /// One poll, and the events it decides.
    pub(super) fn poll_once(&self) -> Result<Poll> {
        let polled = self.elector.poll_keeping(true);
        {
            let mut state = self.state.lock();
            let (now, retry) = (Instant::now(), self.elector.retry_period());
            match &polled {
                Ok(_) => state.reach.answered(now, retry),
                Err(e) => state.reach.failed(e, now, retry),
            }
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
        let (read, retry) = (self.elector.leader(), self.elector.retry_period());
        match read {
            Ok(leader) => {
                let mut state = self.state.lock();
                state.reach.answered(Instant::now(), retry);
                self.observed(&mut state, leader);
            }
            Err(e) => {
                self.state.lock().reach.failed(&e, Instant::now(), retry);
                log::warn!(target: "pgtenure::elector", "{} could not read who leads fleet {:?}: {e}", self.elector.holder, self.elector.name);
                self.error(&e);
            }
        }
        self.flush();
    }

    /// Whether [`Leadership::stop`](super::Leadership::stop) was called: nothing is decided or told after it.
    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Tells the hooks of a failure, unless stopped (the caller of `stop` gets its error).
    fn error(&self, error: &Error) {
        if !self.is_stopped() {
            self.hooks.error(error);
        }
    }

    fn observed(&self, state: &mut CampaignState, leader: Option<LeaderInfo>) {
        if self.is_stopped() {
            return;
        }
        let seen = leader.as_ref().map(|l| (l.holder.clone(), l.term));
        if seen != state.observed {
            state.observed = seen;
            self.to_tell.push(LeaderEvent::Observed(leader));
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
    pub(super) fn stop_believing(&self) {
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

    fn elected(&self, state: &mut CampaignState, term: i64) {
        if self.is_stopped() {
            // Won by a poll in flight when `stop` was called: the loop resigns it.
            return;
        }
        state.announced = Some(term);
        self.to_tell.push(LeaderEvent::Elected { term });
    }

    fn lost(&self, state: &mut CampaignState, reason: LeaderLoss) {
        if reason == LeaderLoss::Expired {
            // The loss is final: the term is resigned, never renewed, so a later win is a new
            // term and writes fenced by this one stay refused (work begun under it may still be
            // winding down).
            self.elector.stand_down();
        }
        if let Some(term) = state.announced.take() {
            log::info!(target: "pgtenure::elector", "{} lost the leadership of fleet {:?} (term {term}): {reason}", self.elector.holder, self.elector.name);
            observe::leader_lost(&self.elector.name, reason.label());
            self.to_tell.push(LeaderEvent::Lost { term, reason });
        }
    }

    /// Delivers every queued event, in order, to the channel and the hooks.
    fn flush(&self) {
        if self.to_tell.is_delivering_here() {
            // Called from a hook (a `stop` or drop of the handle there): the events are delivered
            // once the hook returns, by the delivery it runs in, so the channel keeps their order.
            return;
        }
        // The hooks are the application's code, not a database call: not counted in stop's bound.
        let _paused = self.busy.pause();
        self.to_tell.flush(|event| self.deliver(event));
    }

    /// [`Campaign::flush`] on a thread that is not the campaign's own (the caller of `stop`, of
    /// `resign`, or a `Drop`): a hook that panics there is logged, not propagated into the caller
    /// (a panic in `Drop` while unwinding would abort). The events after it wait for the next
    /// delivery.
    fn flush_caught(&self) {
        if self.to_tell.is_delivering_here() {
            // As in `flush`: the delivery this runs in delivers them.
            return;
        }
        let _paused = self.busy.pause();
        if self
            .to_tell
            .flush_caught(|event| self.deliver(event))
            .is_err()
        {
            log::error!(target: "pgtenure::elector", "{}: a campaign hook for fleet {:?} panicked", self.elector.holder, self.elector.name);
        }
    }

    /// Tells one event to the hooks, then puts it on the channel.
    fn deliver(&self, event: LeaderEvent) {
        match &event {
            LeaderEvent::Elected { term } => self.hooks.elected(*term),
            LeaderEvent::Lost { term, reason } => self.hooks.lost(*term, *reason),
            LeaderEvent::Observed(leader) => self.hooks.observed(leader.as_ref()),
        }
        self.send(event);
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
                // Only the campaign itself keeps a receiver then: cannot happen, and nobody listens.
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

impl Campaigning for Campaign {
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
        if self.to_tell.is_delivering_here() {
            // Called from a hook: the `Lost` is delivered once the hook returns, and the loop
            // sends the resignation after it (`poll_once` and every turn do).
            return Ok(());
        }
        self.flush_caught();
        self.elector.finish_resign()
    }
}
