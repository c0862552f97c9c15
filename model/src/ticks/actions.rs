//! What can happen next in a state: the steps the checker explores from it.

use super::{Action, Proc, State, Ticks, Wait};

impl Ticks {
    /// Every step possible in `state`.
    pub(super) fn offer(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        for (p, proc) in state.procs.iter().enumerate() {
            self.offer_process(state, p, proc, room, actions);
        }
        let locked = Ticks::fence_lock(state);
        for (i, msg) in state.inflight.iter().enumerate() {
            // Every statement but the fence updates the row: it waits for the FOR SHARE lock.
            if !locked || matches!(msg.op, super::Op::Fence { .. }) {
                // Its transaction started at any step since its send (a fence reads
                // clock_timestamp(): when it started does not matter).
                let first = if matches!(msg.op, super::Op::Fence { .. }) {
                    state.now
                } else {
                    msg.sent
                };
                for now in first..=state.now {
                    actions.push(Action::Exec(i, now));
                }
            }
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if state.restarts < self.max_restarts {
            // The last scheduler is killed (the schedulers are alike: which one does not matter)
            // and restarts under its own owner name or a new one.
            let p = state.procs.len() - 1;
            actions.push(Action::Restart(p, false));
            actions.push(Action::Restart(p, true));
        }
    }

    fn offer_process(
        &self,
        state: &State,
        p: usize,
        proc: &Proc,
        room: bool,
        actions: &mut Vec<Action>,
    ) {
        if state.clock_steps < self.max_clock_steps {
            for by in [-1, 1] {
                if (proc.skew + by).abs() <= self.max_skew {
                    actions.push(Action::StepClock(p, by));
                }
            }
        }
        if let Some(wait) = &proc.waiting {
            actions.push(Action::GiveUp(p));
            if matches!(wait, Wait::Claim { .. }) && state.resends < self.max_resends && room {
                actions.push(Action::Resend(p));
            }
            return;
        }
        if proc.fenced.is_some() {
            actions.push(Action::Commit(p));
            return;
        }
        match &proc.run {
            None => {
                let due = state.now + proc.skew;
                if room && proc.next <= due && proc.next <= self.max_tick {
                    actions.push(Action::Claim(p));
                }
            }
            Some(_) => {
                actions.push(Action::End(p));
                if room {
                    actions.push(Action::Extend(p));
                    actions.push(Action::Fence(p));
                }
            }
        }
    }
}
