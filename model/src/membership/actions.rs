//! What can happen next in a state: the steps the checker explores from it.

use super::{Action, Membership, Op, Pid, State, UNITS};

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
        for i in 0..state.inflight.len() {
            actions.push(Action::Exec(i));
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if state.interventions < self.max_interventions {
            actions.push(Action::Restart(state.processes.len() as Pid - 1));
        }
    }

    /// Whether a run may still take an intervention (a restart, a sweep, a release).
    fn budget(&self, state: &State) -> bool {
        state.interventions < self.max_interventions
    }

    /// What process `p` can do: give up waiting or send its next statement (when there is `room`
    /// in flight), its watcher.
    fn offer_process(&self, state: &State, p: Pid, room: bool, actions: &mut Vec<Action>) {
        let process = &state.processes[p as usize];
        if process.deadline.is_some_and(|d| state.now >= d)
            && process.owned.iter().any(Option::is_some)
        {
            actions.push(Action::Watch(p));
        }
        if process.waiting.is_some() {
            actions.push(Action::GiveUp(p));
            return;
        }
        if !room || process.stopped {
            return;
        }
        actions.push(Action::Send(p, Op::Heartbeat));
        let budget = self.budget(state);
        if budget {
            actions.push(Action::Send(p, Op::Sweep));
        }
        let live = process.live(state.now);
        if live && process.owned.iter().any(Option::is_none) {
            // A tick claims (when below its share) and sheds only while its own row is live
            // (status.sql's live_self).
            actions.push(Action::Send(p, Op::Claim));
        }
        if live {
            for u in 0..UNITS {
                if process.owned[u].is_some() {
                    actions.push(Action::Send(p, Op::Shed(u)));
                }
            }
        }
        if budget {
            actions.push(Action::Send(p, Op::Release));
        }
    }
}
