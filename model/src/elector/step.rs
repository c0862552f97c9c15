//! One step: the state after an action, what each statement does when it executes, and what a
//! member decides and tells when its answer arrives (`poll.rs`, `campaigner.rs`, `resign.rs`).

use super::db::PollAnswer;
use super::state::{note_term, orphan};
use super::{Action, Answer, Election, Hole, Member, Msg, Op, State, Term, Wait};

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
            Action::Tick => state.now += 1,
            Action::Send(m, op) => send(&mut state, m, op, self.hole),
            Action::Exec(i) => self.exec(&mut state, i),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(m) => {
                // The call fails: a campaign keeps its deadline (its watcher ends the belief), a
                // resignation waits to be sent again.
                state.members[m].waiting.take()?;
                orphan(&mut state, m);
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
                    holder: 0,
                    op: Op::RequestResign,
                    now: state.now,
                });
            }
            Action::Restart(m, holder) => {
                // Killed: everything local is gone; statements it sent may still execute.
                state.interventions += 1;
                state.members[m] = Member::new(holder);
                orphan(&mut state, m);
            }
        }
        Some(state)
    }

    /// The database executes in-flight statement `i`; its answer goes back unless nobody waits.
    fn exec(&self, state: &mut State, i: usize) {
        let msg = state.inflight.remove(i);
        let before = state.db.row.as_ref().map(|row| row.term);
        let answer = match msg.op {
            Op::Poll { guard } => {
                let answer = state
                    .db
                    .is_leader(msg.now, msg.holder, self.ttl, guard, self.hole);
                msg.member.map(|member| Answer::Poll { member, answer })
            }
            Op::Resign { term } => {
                state.db.resign(msg.now, msg.holder, term);
                msg.member.map(|member| Answer::Resign { member })
            }
            Op::RequestResign => {
                state.db.request_resign(msg.now);
                None
            }
        };
        note_term(state, before);
        state.answers.extend(answer);
    }

    /// Answer `i` reaches its member; `None` when it no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        match state.answers.remove(i) {
            Answer::Resign { member: m } => {
                let wait = state.members[m].waiting.take()?;
                let Op::Resign { term } = wait.op else {
                    return None;
                };
                // finish_resign: forgotten once a resignation of it succeeded.
                let member = &mut state.members[m];
                if member.resigning == Some(term) {
                    member.resigning = None;
                }
                if member.stood_down == Some(term) {
                    member.stood_down = None;
                }
            }
            Answer::Poll { member: m, answer } => {
                let wait = state.members[m].waiting.take()?;
                let Op::Poll { guard } = wait.op else {
                    return None;
                };
                self.polled(state, m, &answer, &wait, guard);
            }
        }
        Some(())
    }

    /// A poll's answer: adopted into the tenure (`adopt_poll`), then decided and told
    /// (`poll_once`).
    fn polled(
        &self,
        state: &mut State,
        m: usize,
        answer: &PollAnswer,
        wait: &Wait,
        guard: Option<Term>,
    ) {
        let ended = answer.my_term.filter(|_| answer.ended);
        let won = answer.my_term.filter(|_| answer.mine);
        let member = &mut state.members[m];
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
            member.deadline = Some(wait.sent + self.ttl);
        } else if member.term == guard {
            // forget_term; asked to step down: the term waits to be resigned.
            member.term = None;
            member.deadline = None;
            if ended.is_some() {
                member.resigning = ended;
                member.stood_down = ended;
            }
        }
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
}

/// Member `m` sends `op`: its transaction starts now, and so does a poll's local deadline.
fn send(state: &mut State, m: usize, op: Op, hole: Option<Hole>) {
    let member = &mut state.members[m];
    if let Op::Resign { term } = op {
        if hole == Some(Hole::ResignForgetsFirst) && member.resigning == Some(term) {
            member.resigning = None;
        }
    }
    member.waiting = Some(Wait {
        op: op.clone(),
        sent: state.now,
        stood_down: false,
    });
    state.inflight.push(Msg {
        member: Some(m),
        holder: member.holder,
        op,
        now: state.now,
    });
}

/// Elector::stand_down: stops believing; the term it won becomes the one to resign; a poll in
/// flight is not led on.
fn stand_down(member: &mut Member) {
    if let Some(wait) = member.waiting.as_mut() {
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
