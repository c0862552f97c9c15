//! What can happen next in a state: the steps the checker explores from it.

use super::{Action, Leases, Op, Owner, Proc, State};

impl Leases {
    /// Every step possible in `state`.
    pub(super) fn offer(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        for (p, proc) in state.procs.iter().enumerate() {
            self.offer_process(state, p, proc, room, actions);
        }
        let lock = Leases::fence_lock(state);
        for (i, msg) in state.inflight.iter().enumerate() {
            // Every statement but the fence updates the row: it waits for another transaction's
            // FOR SHARE lock (the fence's own transaction runs no other statement).
            let blocked = lock.is_some() && !matches!(msg.op, Op::Fence { .. });
            if !blocked {
                actions.push(Action::Exec(i));
            }
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if self.operator && lock.is_none() {
            offer_operator(state, actions);
        }
        if state.failovers < self.max_failovers {
            if state.standby.is_none() {
                actions.push(Action::Lag);
            }
            actions.push(Action::Failover);
        }
        if state.restarts < self.max_restarts {
            // The last process is killed and restarts under its own name, the first process's
            // (another process with the same owner name) or a new one (the library's default
            // owner, fresh per `Leases::new`: each restart's is one no process had), managed or
            // raw. Restarted, it forgets its tenure; what its old incarnation sent may still
            // execute under the old name.
            let p = state.procs.len() - 1;
            let new = (self.procs.len() + usize::from(state.restarts)) as Owner;
            for owner in [state.procs[0].owner, state.procs[p].owner, new] {
                for raw in [false, true] {
                    actions.push(Action::Restart(p, owner, raw));
                }
            }
        }
    }

    /// What process `p` can do: give up waiting, commit its fenced write, or send a statement
    /// (when there is `room` in flight).
    fn offer_process(
        &self,
        state: &State,
        p: usize,
        proc: &Proc,
        room: bool,
        actions: &mut Vec<Action>,
    ) {
        if let Some((op, _)) = &proc.waiting {
            // Assumed: a raw user does not act again before its release's outcome is known.
            // Otherwise a release whose answer was lost can execute after a re-acquire of the
            // same owner name, which keeps the token, and end the grant its holder believes
            // (see docs/reliability.md, "Model checking").
            if self.raw_gives_up_on_release || !(proc.raw && matches!(op, Op::Release { .. })) {
                actions.push(Action::GiveUp(p));
            }
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
            // At any step: a waiting acquire's retry period or a handover notification's
            // wake-up (`Leases::acquire_waiting`) only chooses when; the acquire decides.
            // Db::grant reads the promotion record before a grant when it has none.
            None if proc.record.is_none() => actions.push(Action::Send(p, Op::ReadRecord)),
            None => actions.push(Action::Send(p, Op::Acquire { raw: proc.raw })),
            Some(tenure) => {
                if state.now < tenure.deadline {
                    actions.push(Action::Send(
                        p,
                        if tenure.raw {
                            Op::Renew
                        } else {
                            Op::RenewTenure {
                                token: tenure.token,
                            }
                        },
                    ));
                }
                // release_tenure (raw) and a managed lease's release: guarded by the token.
                // A raw release by key (`Leases::release`) ends whatever tenure the owner name
                // holds when it executes, a later grant of the same name included (as
                // documented): the differential test covers its statement, the checker does
                // not offer it.
                actions.push(Action::Send(
                    p,
                    Op::Release {
                        token: Some(tenure.token),
                    },
                ));
                actions.push(Action::Send(
                    p,
                    Op::Fence {
                        token: tenure.token,
                    },
                ));
            }
        }
    }
}

/// An operator's or a contender's steps: supersede or force-release a live tenure, sweep an
/// expired row.
fn offer_operator(state: &State, actions: &mut Vec<Action>) {
    let live = state
        .db
        .row
        .as_ref()
        .is_some_and(|row| row.held_until > state.now);
    if live && !state.db.row.as_ref().is_some_and(|row| row.superseded) {
        actions.push(Action::Supersede);
    }
    if live {
        actions.push(Action::ForceRelease);
    }
    if state
        .db
        .row
        .as_ref()
        .is_some_and(|row| row.held_until < state.now)
    {
        actions.push(Action::Sweep);
    }
}
