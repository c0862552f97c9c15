//! One step: the state after an action, what each statement does when it executes and what its
//! answer does to the process that reads it.

use super::{Action, Answer, Msg, Op, Owner, Pending, Proc, Semaphores, State, Tenure};

impl Semaphores {
    /// The state after `action` from `last`; `None` when the action does not apply.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Send(p, op) => send(&mut state, p, op),
            Action::Exec(i) => self.exec(&mut state, i),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(p) => {
                // Its answer will never be read; a fence's transaction is rolled back.
                let proc = &mut state.procs[p];
                proc.waiting = None;
                proc.fenced = None;
                state.orphan(p);
            }
            Action::Commit(p) => {
                // The property checks, in the state before this step, that the row still carries
                // the fenced tenure: the write commits under it.
                state.procs[p].fenced.take()?;
            }
            Action::Sweep(slot) => {
                state.db.sweep(state.now, slot);
            }
            Action::Restart(p, owner) => restart(&mut state, p, owner),
        }
        // In-flight statements and answers are sets: any of them can be next.
        state.inflight.sort_unstable();
        state.answers.sort_unstable();
        Some(state)
    }

    /// The database executes in-flight statement `i` (an acquire's first part leaves it in flight
    /// for its second); its answer goes back unless its sender no longer waits.
    fn exec(&self, state: &mut State, i: usize) {
        let before = state.tokens();
        let msg = state.inflight[i].clone();
        let (now, owner, ttl) = (msg.now, msg.owner, self.ttl);
        let (granted, contended) = match msg.op.clone() {
            Op::Acquire(None) => {
                let locked = state.locked();
                let pending =
                    state
                        .db
                        .acquire_begin(now, owner, ttl, self.permits, &locked, self.hole);
                if let Pending::Insert(_) | Pending::Take(_) = pending {
                    // Its second part executes at a later step.
                    state.inflight[i].op = Op::Acquire(Some(pending));
                    state.note_tokens(&before);
                    return;
                }
                state.db.acquire_end(now, owner, ttl, pending)
            }
            Op::Acquire(Some(pending)) => state.db.acquire_end(now, owner, ttl, pending),
            Op::Renew { token } => {
                let renewed = state.db.renew_tenure(now, owner, token, ttl);
                // The answer carries no slot (the renewal reads none): 0.
                (renewed.then_some((0, token)), false)
            }
            Op::Release { token } => {
                state.db.release(now, owner, token);
                (None, false)
            }
            Op::Fence { token } => {
                // clock_timestamp(): the execution's tick, not the transaction's start.
                let admitted = state.db.fence(state.now, owner, token);
                (admitted.map(|slot| (slot, token)), false)
            }
        };
        state.inflight.remove(i);
        state.note_tokens(&before);
        if msg.orphan {
            return;
        }
        if let (Op::Fence { .. }, Some(fenced)) = (&msg.op, granted) {
            // The FOR SHARE lock is held from the statement on, answer delivered or not.
            state.procs[msg.proc].fenced = Some(fenced);
        }
        state.answers.push(Answer {
            proc: msg.proc,
            granted,
            contended,
        });
    }

    /// Answer `i` reaches its process; `None` when that process no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        let answer = state.answers.remove(i);
        let proc = &mut state.procs[answer.proc];
        let (op, sent_at) = proc.waiting.take()?;
        let deadline = sent_at + self.ttl;
        match op {
            // Refused or contended: idle again, it may send another acquire.
            Op::Acquire(_) => {
                if let Some((slot, token)) = answer.granted {
                    proc.tenure = Some(Tenure {
                        slot,
                        token,
                        deadline,
                    });
                }
            }
            Op::Renew { token } => match answer.granted {
                Some(_) => {
                    if let Some(tenure) = proc.tenure.as_mut().filter(|t| t.token == token) {
                        tenure.deadline = tenure.deadline.max(deadline);
                    }
                }
                None => proc.tenure = None,
            },
            Op::Release { .. } => {}
            Op::Fence { .. } => {
                // Refused: the user's transaction rolls back. Admitted: it goes on to its write
                // (the lock is already held, see `exec`).
                if answer.granted.is_none() {
                    proc.fenced = None;
                }
            }
        }
        Some(())
    }
}

/// Process `p` sends `op`: its transaction starts now.
fn send(state: &mut State, p: usize, op: Op) {
    let proc = &mut state.procs[p];
    if let Op::Release { .. } = op {
        // A permit stops believing before its release is sent.
        proc.tenure = None;
    }
    proc.waiting = Some((op.clone(), state.now));
    state.inflight.push(Msg {
        proc: p,
        orphan: false,
        owner: proc.owner,
        op,
        now: state.now,
    });
}

/// Process `p` is killed and restarts as `owner`.
fn restart(state: &mut State, p: usize, owner: Owner) {
    state.restarts += 1;
    // Killed: everything local is gone, its transaction (and a fence's lock) ends with its
    // connections; statements it sent may still execute.
    state.procs[p] = Proc::idle(owner);
    state.orphan(p);
}
