//! What can happen next in a state: the steps the checker explores from it.

use super::{Action, Op, Proc, Semaphores, State};

impl Semaphores {
    /// Every step possible in `state`.
    pub(super) fn offer(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        for (p, proc) in state.procs.iter().enumerate() {
            offer_process(state, p, proc, room, p < self.fencers, actions);
        }
        for (i, msg) in state.inflight.iter().enumerate() {
            // An update of a row waits for a fenced transaction's FOR SHARE lock on it; an
            // acquire's FOR UPDATE SKIP LOCKED passes a locked row over instead (see `Db`).
            let blocked = match msg.op {
                Op::Renew { token } | Op::Release { token } => state.token_locked(token),
                Op::Acquire(Some(super::Pending::Take(slot))) => state.locked().contains(&slot),
                _ => false,
            };
            if !blocked {
                actions.push(Action::Exec(i));
            }
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        let locked = state.locked();
        for (slot, row) in state.db.rows.iter().enumerate() {
            let slot = slot as u8;
            if row.as_ref().is_some_and(|row| row.held_until < state.now) && !locked.contains(&slot)
            {
                actions.push(Action::Sweep(slot));
            }
        }
        if state.restarts < self.max_restarts {
            // The last process is killed and restarts under its own name or the first process's.
            let p = state.procs.len() - 1;
            actions.push(Action::Restart(p, state.procs[p].owner));
            if state.procs[0].owner != state.procs[p].owner {
                actions.push(Action::Restart(p, state.procs[0].owner));
            }
        }
    }
}

/// What process `p` can do: give up waiting, commit its fenced write, or send a statement (when
/// there is `room` in flight).
fn offer_process(
    state: &State,
    p: usize,
    proc: &Proc,
    room: bool,
    fences: bool,
    actions: &mut Vec<Action>,
) {
    if proc.waiting.is_some() {
        actions.push(Action::GiveUp(p));
        return;
    }
    if proc.fenced.is_some() {
        actions.push(Action::Commit(p));
        return;
    }
    if !room {
        return;
    }
    match &proc.tenure {
        None => actions.push(Action::Send(p, Op::Acquire(None))),
        Some(tenure) => {
            let token = tenure.token;
            // The renewal thread renews while the permit is believed.
            if state.now < tenure.deadline {
                actions.push(Action::Send(p, Op::Renew { token }));
            }
            actions.push(Action::Send(p, Op::Release { token }));
            if fences {
                actions.push(Action::Send(p, Op::Fence { token }));
            }
        }
    }
}
