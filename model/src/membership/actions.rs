//! What can happen next in a state: the steps the checker explores from it.

use super::decide::{decide, Step};
use super::{Action, Hole, Membership, Op, Pid, State, UNITS};

impl Membership {
    /// Every step possible in `state`.
    pub(super) fn offer(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        for p in 0..state.processes.len() {
            self.offer_process(state, p as Pid, room, actions);
        }
        for (i, msg) in state.inflight.iter().enumerate() {
            // release.sql waits for a fenced transaction holding one of its process's units.
            let waits = msg.op == Op::Release
                && (state.db.locked).is_some_and(|u| state.db.units[u].owner == Some(msg.process));
            if !waits {
                actions.push(Action::Exec(i));
            }
        }
        self.offer_fences(state, actions);
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if self.budget(state) {
            let last = self.processes as Pid - 1;
            actions.push(Action::Restart(last));
            // A spare id not started yet.
            let spare = (self.processes..state.processes.len())
                .find(|&q| state.processes[q].down && state.db.processes[q].is_none());
            if let Some(q) = spare {
                actions.push(Action::Replace(last, q as Pid));
            }
        }
    }

    /// A reconciler's fenced transaction: begun for a unit it works on (by the local view, as
    /// `Leaser::token` reads it), one at a time; committed at any later step.
    fn offer_fences(&self, state: &State, actions: &mut Vec<Action>) {
        if state.fenced.is_some() {
            actions.push(Action::Commit);
            return;
        }
        if state.fences >= self.max_fences {
            return;
        }
        for (p, process) in state.processes.iter().enumerate() {
            for u in 0..UNITS {
                if process.believes(u, state.now).is_some() {
                    actions.push(Action::Fence(p as Pid, u));
                }
            }
        }
    }

    /// Whether a run may still take an intervention (a restart, a sweep, a release).
    fn budget(&self, state: &State) -> bool {
        state.interventions < self.max_interventions
    }

    /// What process `p` can do: deliver its outbox, give up waiting or send its next statement
    /// (when there is `room` in flight), its watcher.
    fn offer_process(&self, state: &State, p: Pid, room: bool, actions: &mut Vec<Action>) {
        let process = &state.processes[p as usize];
        if process.down {
            return;
        }
        if !process.outbox.is_empty() {
            actions.push(Action::Flush(p));
        }
        if process.deadline.is_some_and(|d| state.now >= d)
            && process.owned.iter().any(Option::is_some)
        {
            actions.push(Action::Watch(p));
        }
        if process.waiting.is_some() {
            actions.push(Action::GiveUp(p));
            return;
        }
        // The loop delivers what it decided before its next statement (`Leaser::deliver`); a
        // give-back it decided is sent only then (`Local::to_give_back`), but with the hole.
        let delivered = process.barrier == 0;
        let early =
            self.hole == Some(Hole::ShedBeforeTold) && matches!(process.pending, Some(Op::Shed(_)));
        if !room || !(delivered || early) {
            return;
        }
        if let Some(op) = &process.pending {
            actions.push(Action::Send(p, op.clone()));
            return;
        }
        if process.stopped || !delivered {
            return;
        }
        actions.push(Action::Send(p, Op::Heartbeat));
        // Back from an outage (the rule on), it claims, sheds and sweeps nothing.
        let defers = self.cut_off(p) && process.defers(state.now);
        let budget = self.budget(state);
        if budget && !defers {
            actions.push(Action::Send(p, Op::Sweep));
        }
        // A tick claims or sheds only while live by its local deadline and its row
        // (stats.sql's live_self).
        if process.live(state.now) && !defers {
            match decide(&state.db, state.now, p, process) {
                Step::Claim(weight) => actions.push(Action::Send(p, Op::Claim(weight))),
                Step::Shed(u) => actions.push(Action::Decide(p, Op::Shed(u))),
                Step::Keep => {}
            }
        }
        if budget {
            actions.push(Action::Decide(p, Op::Release));
        }
    }
}
