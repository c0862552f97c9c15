//! What can happen next in a state: the steps the checker explores from it.

use super::{Action, Election, Hole, Op, State};

/// The holder name a restarted process takes when it does not reuse one.
const NEW_HOLDER: u8 = 2;

impl Election {
    /// Every step possible in `state`.
    pub(super) fn offer(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        let budget = state.interventions < self.max_interventions;
        for m in 0..state.members.len() {
            self.offer_member(state, m, room, budget, actions);
        }
        for i in 0..state.inflight.len() {
            if !self.waits_for_a_fence(state, i) {
                actions.push(Action::Exec(i));
            }
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if room && budget && self.requests {
            actions.push(Action::RequestResign);
        }
        if state.failovers < self.max_failovers {
            if state.standby.is_none() {
                actions.push(Action::Lag);
            }
            actions.push(Action::Failover);
        }
        if self.clone && room && state.members[0].clone.is_none() {
            // Elector::is_leader on a clone: the resignation waiting first, else a poll guarded
            // by the shared tenure's term (once the record is read: the campaign reads it).
            let member = &state.members[0];
            if let Some(term) = member.resigning {
                actions.push(Action::CloneSend(0, Op::Resign { term }));
            } else if member.record.is_some() {
                actions.push(Action::CloneSend(0, Op::Poll { guard: member.term }));
            }
        }
        if state.members[0].clone.is_some() {
            actions.push(Action::CloneGiveUp(0));
        }
        if budget && self.restarts {
            // The last member is killed and restarts under its own holder name, the first
            // member's (two electors with one holder name), or a new one.
            let m = state.members.len() - 1;
            for holder in [state.members[m].holder, state.members[0].holder, NEW_HOLDER] {
                actions.push(Action::Restart(m, holder));
            }
        }
    }

    /// Whether in-flight statement `i` waits for a fenced transaction's FOR SHARE lock: it would
    /// update the row (a renewal, a new election, a resignation, a request to resign; a poll of
    /// anyone else while a leader is live matches no row and does not wait).
    fn waits_for_a_fence(&self, state: &State, i: usize) -> bool {
        let locked = state
            .members
            .iter()
            .any(|member| matches!(member.fence, Some((_, true))));
        if !locked
            || self.hole == Some(Hole::FenceWithoutLock)
            || matches!(state.inflight[i].op, Op::Fence { .. })
        {
            return false;
        }
        let mut trial = state.clone();
        self.exec(&mut trial, i);
        trial.db.row != state.db.row
    }

    /// What member `m` can do: give up waiting, or send its next statement (when there is `room`
    /// in flight, `budget` for an intervention); its watcher; a stop or a resignation asked of it.
    fn offer_member(
        &self,
        state: &State,
        m: usize,
        room: bool,
        budget: bool,
        actions: &mut Vec<Action>,
    ) {
        let member = &state.members[m];
        if member.waiting.is_some() {
            actions.push(Action::GiveUp(m));
        } else if room {
            // The loop sends a resignation waiting before its poll, and polls again whether or not
            // it succeeded; polls at any time (the retry period, standing aside after a
            // resignation, a handover notification's wake-up, which only makes the next poll
            // earlier and is never read as a grant) only allow more interleavings. A stopped
            // campaign only resigns.
            if let Some(term) = member.resigning {
                actions.push(Action::Send(m, Op::Resign { term }));
            }
            if !member.stopped {
                actions.push(Action::Send(
                    m,
                    match member.record {
                        // Back from an outage (the rule on) and not the leader it last saw: it
                        // only reads who leads, and takes nothing.
                        _ if self.cut_off(m) && member.defers(state.now) => Op::Observe,
                        // Db::grant reads the promotion record before a poll when it has none.
                        None => Op::ReadRecord,
                        Some(_) => Op::Poll { guard: member.term },
                    },
                ));
            }
        }
        if member.announced.is_some() && member.elector_term(state.now).is_none() {
            actions.push(Action::Watch(m));
        }
        if !member.stopped && budget && self.stops {
            actions.push(Action::Stop(m));
        }
        if !member.stopped && budget && self.resigns && member.term.is_some() {
            actions.push(Action::Resign(m));
        }
        // The user's transaction on a thread of its own: `Leadership::fence` while it leads,
        // then its write commits once the fence admitted it.
        match member.fence {
            None if state.fences < self.max_fences && member.leading(state.now).is_some() => {
                actions.push(Action::Fence(m));
            }
            Some((_, true)) => actions.push(Action::Commit(m)),
            _ => {}
        }
    }
}
