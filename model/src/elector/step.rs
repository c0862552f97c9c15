//! One step: the state after an action, what each statement does when it executes, and what a
//! member decides and tells when its answer arrives (`poll.rs`, `campaigner.rs`, `resign.rs`).

use super::db::PollAnswer;
use super::state::{note_term, orphan, Reach, Standby};
use super::{Action, Answer, Election, Hole, Member, Msg, Op, State, Term, Tick, Wait};
use crate::failover::{Grant, Record, Timeline};

/// is_leader.sql's `$10` in ticks: the members' retry period, by which others wait longer than the
/// last leader for a lapsed leadership after a promotion's hold-off.
const PREFER: Tick = 1;

/// Why a campaign tells `Lost` (`LeaderLoss`); only `Expired` changes what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    Expired,
    Taken,
    ResignRequested,
    Stopped,
    Resigned,
}

impl Election {
    /// The state after `action` from `last`; `None` when the action does not apply.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => tick(&mut state),
            Action::Send(m, op) => send(&mut state, m, op, self.hole, false),
            Action::CloneSend(m, op) => send(&mut state, m, op, self.hole, true),
            Action::CloneGiveUp(m) => {
                // Elector::is_leader's call fails: a failed poll drops the leadership at once.
                let wait = state.members[m].clone.take()?;
                if matches!(wait.op, Op::Poll { .. }) {
                    state.members[m].deadline = None;
                }
                orphan(&mut state, m, Some(true));
            }
            Action::Lag => lag(&mut state),
            Action::Failover => failover(&mut state),
            Action::Fence(m) => fence(&mut state, m)?,
            // The property checks, in the state before this step, that the row still carries the
            // fenced term: the write commits under it (and its FOR SHARE lock is released).
            Action::Commit(m) => state.members[m].fence.take()?.1.then_some(())?,
            Action::Exec(i) => self.exec(&mut state, i),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(m) => {
                // The call fails: a campaign keeps its deadline (its watcher ends the belief), a
                // resignation waits to be sent again. A poll or a read of who leads failed for
                // want of the database: the campaign is cut off (a resignation's failure is not
                // counted, as in the library).
                let wait = state.members[m].waiting.take()?;
                if self.cut_off(m) && !matches!(wait.op, Op::Resign { .. }) {
                    state.members[m].reach = Reach::CutOff;
                }
                orphan(&mut state, m, Some(false));
            }
            Action::Watch(m) => {
                let member = &state.members[m];
                if member.announced.is_none() || member.elector_term(state.now).is_some() {
                    return None;
                }
                lost(&mut state, m, Loss::Expired);
            }
            Action::Stop(m) => {
                state.interventions += 1;
                // stop_believing: under the campaign's state, nothing decided or told after it.
                state.members[m].stopped = true;
                stand_down(&mut state.members[m]);
                lost(&mut state, m, Loss::Stopped);
            }
            Action::Resign(m) => {
                // Campaigning::resign: stops believing and tells the loss; the resignation is
                // sent next (by the caller's thread or the loop's next turn: `Send` below).
                state.interventions += 1;
                stand_down(&mut state.members[m]);
                lost(&mut state, m, Loss::Resigned);
            }
            Action::RequestResign => {
                state.interventions += 1;
                state.inflight.push(Msg {
                    member: None,
                    clone: false,
                    holder: 0,
                    op: Op::RequestResign,
                    now: state.now,
                    record: Record::default(),
                    last: None,
                });
            }
            Action::Restart(m, holder) => {
                // Killed: everything local is gone; statements it sent may still execute.
                state.interventions += 1;
                state.members[m] = Member::new(holder);
                if self.max_failovers > 0 {
                    // Its new Db reads the promotion record before its first poll (without
                    // failover the record never changes, and that read is left out).
                    state.members[m].record = None;
                }
                orphan(&mut state, m, None);
            }
        }
        Some(state)
    }

    /// The database executes in-flight statement `i`; its answer goes back unless nobody waits.
    pub(super) fn exec(&self, state: &mut State, i: usize) {
        let msg = state.inflight.remove(i);
        let before = state.db.row.as_ref().map(|row| row.term);
        let clone = msg.clone;
        let answer = match msg.op {
            Op::Poll { guard } => {
                let grant = Grant {
                    fold: true,
                    hold_off: self.hole != Some(Hole::NoHoldOff),
                    record: msg.record,
                    prefer: PREFER,
                };
                let answer = state.db.is_leader(
                    msg.now,
                    msg.holder,
                    self.ttl,
                    (guard, msg.last),
                    &grant,
                    self.hole,
                );
                // The campaign polls at any idle step in the model: when the gate opens needs no
                // state of its own.
                let answer = PollAnswer {
                    held_off: None,
                    ..answer
                };
                let timeline = state.db.timeline;
                msg.member.map(|member| Answer::Poll {
                    member,
                    clone,
                    answer,
                    timeline,
                })
            }
            Op::Resign { term } => {
                state.db.resign(msg.now, msg.holder, term);
                msg.member.map(|member| Answer::Resign { member, clone })
            }
            Op::ReadRecord => {
                let timeline = state.db.timeline;
                let record = state.db.record.read(timeline, msg.now, self.ttl);
                msg.member.map(|member| Answer::Record { member, record })
            }
            Op::RequestResign => {
                state.db.request_resign(msg.now);
                None
            }
            Op::Observe => {
                // leader.sql: the row live at the transaction's now(); nothing written.
                let leads = state
                    .db
                    .row
                    .as_ref()
                    .is_some_and(|row| row.expires_at > msg.now && row.holder == msg.holder);
                msg.member.map(|member| Answer::Observe { member, leads })
            }
            Op::Fence { term } => {
                // The transaction whose fence this is (its member's, unless a restart or a
                // failover ended it); clock_timestamp() is the execution's tick. Admitted, its
                // FOR SHARE lock is held from the statement on; refused, the user rolls back.
                let admitted = state.db.fence(state.now, msg.holder, term);
                if let Some(member) = state
                    .members
                    .iter_mut()
                    .find(|m| m.holder == msg.holder && m.fence == Some((term, false)))
                {
                    member.fence = admitted.then_some((term, true));
                }
                None
            }
        };
        note_term(state, before);
        state.answers.extend(answer);
    }

    /// Answer `i` reaches its member (its campaign's thread or its clone's); `None` when that
    /// thread no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        let answer = state.answers.remove(i);
        let (m, clone) = answer.to();
        let member = &mut state.members[m];
        let wait = if clone {
            member.clone.take()?
        } else {
            member.waiting.take()?
        };
        match (answer, wait.op.clone()) {
            (Answer::Resign { .. }, Op::Resign { term }) => {
                // finish_resign: forgotten once a resignation of it succeeded.
                if member.resigning == Some(term) {
                    member.resigning = None;
                }
                if member.stood_down == Some(term) {
                    member.stood_down = None;
                }
            }
            (Answer::Record { record, .. }, Op::ReadRecord) => member.record = Some(record),
            (Answer::Observe { leads, .. }, Op::Observe) => {
                answered(member, state.now, self.outage);
                member.led = leads;
            }
            (
                Answer::Poll {
                    answer, timeline, ..
                },
                Op::Poll { guard },
            ) => {
                if !clone && self.cut_off(m) {
                    // The campaign's poll was answered: back from an outage, if cut off.
                    answered(member, state.now, self.outage);
                    member.led = answer.leader.is_some_and(|(h, _, _)| h == member.holder);
                }
                if answer.stale {
                    // Db::grant reads the record again; a poll that neither renewed nor won is
                    // sent again (here: a poll sent later), its answer not adopted.
                    member.record = None;
                    if !answer.mine {
                        return Some(());
                    }
                }
                let ended = self.adopt(member, &answer, &wait, guard, timeline);
                if !clone {
                    decide(state, m, ended);
                }
            }
            _ => return None,
        }
        Some(())
    }

    /// A poll's answer adopted into the (shared) tenure (`adopt_poll`); returns the term it was
    /// asked to step down from, if any.
    fn adopt(
        &self,
        member: &mut Member,
        answer: &PollAnswer,
        wait: &Wait,
        guard: Option<Term>,
        timeline: Timeline,
    ) -> Option<Term> {
        let ended = answer.my_term.filter(|_| answer.ended);
        let won = answer.my_term.filter(|_| answer.mine);
        if wait.stood_down {
            // resign_won_meanwhile: resigned like the one given up, never led on.
            if let Some(term) = won {
                if member.term.is_none() && member.resigning.is_none_or(|r| r <= term) {
                    member.resigning = Some(term);
                }
            }
        } else if let Some(term) = won {
            // lead: until the instant recorded before sending, plus the TTL.
            member.term = Some(term);
            member.last = member.last.max(Some(term));
            member.deadline = Some(wait.sent + self.ttl);
            member.timeline = timeline;
        } else if member.term == guard {
            // forget_term; asked to step down: the term waits to be resigned.
            member.term = None;
            member.deadline = None;
            if ended.is_some() {
                member.resigning = ended;
                member.stood_down = ended;
                if self.ended_stands_down {
                    for wait in [&mut member.waiting, &mut member.clone]
                        .into_iter()
                        .flatten()
                    {
                        wait.stood_down = true;
                    }
                }
            }
        }
        ended
    }
}

/// The database clock (and every local clock) advances one tick; a deferral that ended is no
/// deferral (`Reach::defers` forgets it).
fn tick(state: &mut State) {
    state.now += 1;
    for member in &mut state.members {
        if matches!(member.reach, Reach::Back(until) if until <= state.now) {
            member.reach = Reach::Reached;
        }
    }
}

/// `Reach::answered`: a statement of the campaign was answered at `now`; cut off, it defers one
/// retry period (`outage`, in ticks) from now.
fn answered(member: &mut Member, now: Tick, outage: Option<Tick>) {
    if let (Reach::CutOff, Some(period)) = (member.reach, outage) {
        member.reach = Reach::Back(now + period);
    }
}

/// The campaign decides on its poll's answer and tells (`poll_once`).
fn decide(state: &mut State, m: usize, ended: Option<Term>) {
    let member = &state.members[m];
    let leading = member.elector_term(state.now);
    match (member.announced, leading) {
        (None, Some(term)) => elected(state, m, term),
        (Some(was), Some(term)) if was != term => {
            lost(state, m, Loss::Taken);
            elected(state, m, term);
        }
        (Some(_), None) => {
            let reason = if ended.is_some() {
                Loss::ResignRequested
            } else if member.term.is_some() {
                // Renewed, but the answer came past the local deadline.
                Loss::Expired
            } else {
                Loss::Taken
            };
            lost(state, m, reason);
        }
        _ => {}
    }
}

/// Member `m` (its clone with `clone`) sends `op`: its transaction starts now, and so does a
/// poll's local deadline.
fn send(state: &mut State, m: usize, op: Op, hole: Option<Hole>, clone: bool) {
    let member = &mut state.members[m];
    if let Op::Resign { term } = op {
        if hole == Some(Hole::ResignForgetsFirst) && member.resigning == Some(term) {
            member.resigning = None;
        }
    }
    let wait = Some(Wait {
        op: op.clone(),
        sent: state.now,
        stood_down: false,
    });
    if clone {
        member.clone = wait;
    } else {
        member.waiting = wait;
    }
    state.inflight.push(Msg {
        member: Some(m),
        clone,
        holder: member.holder,
        op,
        now: state.now,
        record: member.record.unwrap_or_default(),
        last: member.last,
    });
}

/// The standby stops receiving: it keeps what it received so far.
fn lag(state: &mut State) {
    let db = &state.db;
    state.standby = Some(Standby {
        row: db.row.clone(),
        seq: db.seq,
        record: db.record,
    });
}

/// The standby is promoted: what it did not receive is lost, the connections to the old primary
/// break (statements in flight never execute, their senders give up), and the timeline grows by
/// one. The row going back is not a term going back: the terms the properties follow are those
/// handed out, which every new tenure must be above.
fn failover(state: &mut State) {
    state.failovers += 1;
    if let Some(standby) = state.standby.take() {
        state.db.row = standby.row;
        state.db.seq = standby.seq;
        state.db.record = standby.record;
    }
    state.db.timeline += 1;
    state.inflight.clear();
    // Open transactions (a fence's) end with the connections.
    for member in &mut state.members {
        member.fence = None;
    }
}

/// Member `m`'s user begins a transaction and sends fence.sql for the term it leads with (its
/// transaction starts now; fence.sql reads clock_timestamp() when it executes).
fn fence(state: &mut State, m: usize) -> Option<()> {
    let member = &mut state.members[m];
    let term = member.leading(state.now)?;
    member.fence = Some((term, false));
    state.fences += 1;
    let holder = member.holder;
    state.inflight.push(Msg {
        member: Some(m),
        clone: false,
        holder,
        op: Op::Fence { term },
        now: state.now,
        record: Record::default(),
        last: None,
    });
    Some(())
}

/// Elector::stand_down: stops believing; the term it won becomes the one to resign; a poll in
/// flight is not led on.
fn stand_down(member: &mut Member) {
    for wait in [&mut member.waiting, &mut member.clone]
        .into_iter()
        .flatten()
    {
        wait.stood_down = true;
    }
    member.deadline = None;
    if let Some(term) = member.term.take() {
        member.resigning = Some(term);
        member.stood_down = Some(term);
    }
}

/// Campaign::elected: tells `Elected` unless stopped.
fn elected(state: &mut State, m: usize, term: Term) {
    if state.members[m].stopped {
        return;
    }
    if state.members[m].announced.is_some() {
        state.gain_before_loss = true;
    }
    if term <= state.elected {
        state.elected_went_back = true;
    }
    state.elected = state.elected.max(term);
    state.members[m].announced = Some(term);
}

/// Campaign::lost: an expiry is final (the term is stood down from); tells `Lost` if announced.
fn lost(state: &mut State, m: usize, reason: Loss) {
    let member = &mut state.members[m];
    if reason == Loss::Expired {
        stand_down(member);
    }
    member.announced = None;
}
