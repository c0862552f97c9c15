//! One step: the state after an action, what each statement does when it executes and what its
//! answer does to the scheduler that reads it.

use super::db::{Claim, Claimed};
use super::state::{note_token, orphan};
use super::{Action, Answer, Hole, Msg, Op, Owner, Proc, Run, State, Tick, Ticks, Wait};

impl Ticks {
    /// The state after `action` from `last`; `None` when the action does not apply.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => tick(&mut state),
            Action::StepClock(p, by) => {
                state.clock_steps += 1;
                state.procs[p].skew += by;
            }
            Action::Claim(p) => {
                let proc = &state.procs[p];
                let tick = (state.now + proc.skew).min(self.max_tick);
                state.claim_ids += 1;
                let id = state.claim_ids;
                let now = state.now;
                state.procs[p].waiting = Some(Wait::Claim {
                    tick,
                    id,
                    sent: now,
                });
                send(&mut state, p, Op::Claim { tick, id });
            }
            Action::Resend(p) => {
                let Some(Wait::Claim { tick, id, .. }) = state.procs[p].waiting else {
                    return None;
                };
                state.resends += 1;
                orphan(&mut state, p);
                send(&mut state, p, Op::Claim { tick, id });
            }
            Action::Extend(p) => {
                let token = state.procs[p].run.as_ref()?.token;
                state.procs[p].waiting = Some(Wait::Extend { sent: state.now });
                send(&mut state, p, Op::Extend { token });
            }
            Action::Fence(p) => {
                let token = state.procs[p].run.as_ref()?.token;
                state.procs[p].waiting = Some(Wait::Fence);
                send(&mut state, p, Op::Fence { token });
            }
            Action::Commit(p) => {
                // The property checks, in the state before this step, that the row still carries
                // the fenced claim: the write commits under it.
                state.procs[p].fenced.take()?;
            }
            Action::End(p) => end(&mut state, p),
            Action::Exec(i, now) => self.exec(&mut state, i, now),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(p) => {
                let proc = &mut state.procs[p];
                if let Some(Wait::Claim { tick, .. }) = proc.waiting {
                    // An error: the scheduler looks at the same tick again later.
                    proc.next = tick;
                }
                proc.waiting = None;
                proc.fenced = None;
                orphan(&mut state, p);
            }
            Action::Restart(p, new_owner) => restart(&mut state, p, new_owner),
        }
        Some(state)
    }

    /// The database executes in-flight statement `i` with `now()` = `now` (a fence reads the current
    /// tick: `clock_timestamp()`); its answer goes back unless its sender no longer waits.
    fn exec(&self, state: &mut State, i: usize, now: Tick) {
        let msg = state.inflight.remove(i);
        let before = state.db.row.as_ref().map(|row| row.token);
        let clock = state.now;
        let (db, owner, busy) = (&mut state.db, msg.owner, self.busy);
        let answer = match msg.op {
            Op::Claim { tick, id } => Answer::Claim(
                msg.proc,
                db.claim(
                    now,
                    Claim {
                        tick,
                        busy,
                        owner,
                        claim_id: id,
                        lead: 0,
                    },
                    self.hole,
                ),
            ),
            Op::Extend { token } => {
                let extended = db.extend(now, owner, token, busy);
                if extended && self.hole == Some(Hole::ExtendMayShorten) {
                    if let Some(row) = db.row.as_mut() {
                        row.busy_until = Some(now + busy);
                    }
                }
                Answer::Matched(msg.proc, extended)
            }
            Op::Release { token } => Answer::Matched(msg.proc, db.release(now, owner, token)),
            Op::Fence { token } => {
                let admitted = db.fence(clock, owner, token);
                if admitted && !msg.orphan {
                    // The FOR SHARE lock is held from the statement on.
                    state.procs[msg.proc].fenced = Some(token);
                }
                Answer::Matched(msg.proc, admitted)
            }
        };
        note_token(state, before);
        if !msg.orphan {
            state.answers.push(answer);
        }
    }

    /// Answer `i` reaches its scheduler; `None` when it no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        let answer = state.answers.remove(i);
        let p = answer.proc();
        let wait = state.procs[p].waiting.take()?;
        match (wait, answer) {
            (Wait::Claim { tick, sent, .. }, Answer::Claim(_, claimed)) => {
                self.claimed(state, p, tick, sent, claimed)
            }
            (Wait::Extend { sent }, Answer::Matched(_, true)) => {
                if let Some(run) = state.procs[p].run.as_mut() {
                    run.deadline = run.deadline.max(sent + self.busy);
                }
            }
            (Wait::Extend { .. }, _) => {}
            (Wait::Fence, Answer::Matched(_, admitted)) => {
                if !admitted {
                    state.procs[p].fenced = None;
                }
            }
            _ => return None,
        }
        Some(())
    }

    /// Scheduler `p` reads its claim's answer: not yet due, refused, or won (the run begins).
    fn claimed(&self, state: &mut State, p: usize, tick: i8, sent: i8, claimed: Claimed) {
        let proc = &mut state.procs[p];
        if claimed.too_far {
            proc.next = tick;
            return;
        }
        proc.next = tick + 1;
        let Some(token) = claimed.token else {
            return;
        };
        match state.ran.binary_search(&tick) {
            Ok(_) => state.ran_twice = true,
            Err(at) => state.ran.insert(at, tick),
        }
        if state.now < tick {
            state.ran_early = true;
        }
        proc.run = Some(Run {
            tick,
            token,
            deadline: sent + self.busy,
        });
        if sent + self.busy <= state.now {
            // Won after its deadline: it stops at once.
            end(state, p);
        }
    }
}

/// Scheduler `p` sends `op`.
fn send(state: &mut State, p: usize, op: Op) {
    let owner = state.procs[p].owner;
    let sent = state.now;
    state.inflight.push(Msg {
        proc: p,
        sent,
        orphan: false,
        owner,
        op,
    });
}

/// Scheduler `p`'s run ends (its transaction with it); the release is sent, its answer not
/// waited for.
fn end(state: &mut State, p: usize) {
    let proc = &mut state.procs[p];
    let Some(run) = proc.run.take() else {
        return;
    };
    proc.fenced = None;
    proc.waiting = None;
    orphan(state, p);
    state.inflight.push(Msg {
        proc: p,
        sent: state.now,
        orphan: true,
        owner: state.procs[p].owner,
        op: Op::Release { token: run.token },
    });
}

/// The clock advances one tick; a run whose local deadline is reached stops.
fn tick(state: &mut State) {
    state.now += 1;
    for p in 0..state.procs.len() {
        if state.procs[p]
            .run
            .as_ref()
            .is_some_and(|run| run.deadline <= state.now)
        {
            end(state, p);
        }
    }
}

/// Scheduler `p` is killed (its run, its transaction and what it knew of the job with it) and
/// restarts under its own owner name or, with `new_owner`, one no scheduler had (the schedulers'
/// count plus the restarts so far); statements it sent may still execute, under its old name.
fn restart(state: &mut State, p: usize, new_owner: bool) {
    let owner = if new_owner {
        (state.procs.len() + usize::from(state.restarts)) as Owner
    } else {
        state.procs[p].owner
    };
    state.restarts += 1;
    let proc = &mut state.procs[p];
    *proc = Proc {
        owner,
        skew: proc.skew,
        next: 0,
        waiting: None,
        run: None,
        fenced: None,
    };
    orphan(state, p);
}
