//! One step: the state after an action, what each statement does when it executes and what its
//! answer does to the process that reads it.

use super::state::{note_token, orphan, Standby};
use super::{Action, Answer, Hole, Leases, Msg, Op, Owner, Proc, State, Tenure};
use crate::failover::{Grant, Record};

impl Leases {
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
                orphan(&mut state, p);
            }
            Action::Commit(p) => {
                // The property checks, in the state before this step, that the row still carries
                // the fenced tenure: the write commits under it.
                state.procs[p].fenced.take()?;
            }
            Action::Supersede => {
                state.db.supersede(state.now);
            }
            Action::ForceRelease => force_release(&mut state, self.hole),
            Action::Sweep => {
                state.db.sweep(state.now);
            }
            Action::Restart(p, owner, raw) => {
                restart(&mut state, p, owner, raw);
                if self.max_failovers == 0 {
                    // Without failover the record never changes: the new Db's first read of it
                    // (one more statement before its first grant) is left out.
                    state.procs[p].record = Some(Record::seeded());
                }
            }
            Action::Lag => {
                let db = &state.db;
                state.standby = Some(Standby {
                    row: db.row.clone(),
                    seq: db.seq,
                    record: db.record,
                });
            }
            Action::Failover => failover(&mut state),
        }
        Some(state)
    }

    /// The parameters `$5`..`$9` of an acquire sent with `record`.
    fn grant(&self, record: Record) -> Grant {
        Grant {
            fold: true,
            hold_off: self.hole != Some(Hole::NoHoldOff),
            record,
            ..Grant::plain()
        }
    }

    /// The database executes in-flight statement `i`; its answer goes back unless its sender no
    /// longer waits.
    fn exec(&self, state: &mut State, i: usize) {
        let msg = state.inflight.remove(i);
        let before = state.db.row.as_ref().map(|row| row.token);
        let (mut stale, mut record) = (false, None);
        let granted = match msg.op {
            Op::Acquire { raw } => {
                let grant = self.grant(msg.record);
                let acquired = state
                    .db
                    .acquire(msg.now, msg.owner, self.ttl, raw, &grant, self.hole);
                stale = acquired.stale;
                acquired.granted.map(|(token, _)| token)
            }
            Op::ReadRecord => {
                let timeline = state.db.timeline;
                record = Some(state.db.record.read(timeline, msg.now, self.ttl));
                None
            }
            Op::RenewTenure { token } => state
                .db
                .renew_tenure(msg.now, msg.owner, token, self.ttl, self.hole)
                .map(|_| token),
            Op::Renew => state
                .db
                .renew(msg.now, msg.owner, self.ttl)
                .map(|(token, _)| token),
            Op::Release { token } => {
                state.db.release(msg.now, msg.owner, token);
                None
            }
            Op::Fence { token } => {
                // clock_timestamp(): the execution's tick, not the transaction's start.
                state.db.fence(state.now, msg.owner, token).then_some(token)
            }
        };
        note_token(state, before);
        if !msg.orphan {
            state.answers.push(Answer {
                proc: msg.proc,
                granted,
                stale,
                timeline: state.db.timeline,
                record,
            });
            if let Op::Fence { token } = msg.op {
                // The FOR SHARE lock is held from the statement on, answer delivered or
                // not.
                if granted.is_some() && self.hole != Some(Hole::FenceWithoutShareLock) {
                    state.procs[msg.proc].fenced = Some(token);
                }
            }
        }
    }

    /// Answer `i` reaches its process; `None` when that process no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        let answer = state.answers.remove(i);
        let now = state.now;
        let ttl = self.ttl;
        let hole = self.hole;
        let proc = &mut state.procs[answer.proc];
        let (op, sent_at) = proc.waiting.take()?;
        let recorded = if hole == Some(Hole::DeadlineAfterAnswer) {
            now
        } else {
            sent_at
        };
        match op {
            Op::Acquire { raw } => {
                if answer.stale {
                    // Db::grant: the record is read again (and the grant, if refused, sent again).
                    proc.record = None;
                }
                if let Some(token) = answer.granted {
                    proc.tenure = Some(Tenure {
                        token,
                        raw,
                        deadline: recorded + ttl,
                        timeline: answer.timeline,
                    });
                }
            }
            Op::ReadRecord => proc.record = answer.record,
            Op::RenewTenure { .. } | Op::Renew => match answer.granted {
                Some(token) => {
                    if let Some(tenure) = proc.tenure.as_mut() {
                        if tenure.token == token && recorded + ttl >= tenure.deadline {
                            tenure.deadline = recorded + ttl;
                            tenure.timeline = answer.timeline;
                        }
                    }
                }
                None => proc.tenure = None,
            },
            Op::Release { .. } => {}
            Op::Fence { .. } => {
                // Refused: the user's transaction rolls back. Admitted: it goes on to
                // its write (the lock is already held, see Exec).
                if answer.granted.is_none() {
                    proc.fenced = None;
                } else if hole == Some(Hole::FenceWithoutShareLock) {
                    proc.fenced = answer.granted;
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
        // A lease stops believing before its release is sent.
        proc.tenure = None;
    }
    proc.waiting = Some((op.clone(), state.now));
    state.inflight.push(Msg {
        proc: p,
        orphan: false,
        owner: proc.owner,
        op,
        now: state.now,
        record: proc.record.unwrap_or_default(),
    });
}

/// An operator's force-release: the tenure it ends is noted, for the properties.
fn force_release(state: &mut State, hole: Option<Hole>) {
    let before = state.db.row.as_ref().map(|row| row.token);
    let fold = hole != Some(Hole::NoTimelineFold);
    if state.db.force_release(state.now, fold).is_some() {
        if let Some(token) = before {
            state.forced.push(token);
            state.forced.sort_unstable();
        }
    }
    note_token(state, before);
}

/// Process `p` is killed and restarts as `owner`, raw or managed.
fn restart(state: &mut State, p: usize, owner: Owner, raw: bool) {
    state.restarts += 1;
    let proc = &mut state.procs[p];
    // Killed: everything local is gone, its transaction (and a fence's lock) ends with
    // its connections; statements it sent may still execute.
    *proc = Proc {
        owner,
        raw,
        tenure: None,
        waiting: None,
        fenced: None,
        record: None,
    };
    orphan(state, p);
}

/// The standby is promoted: what it did not receive is lost, the connections to the old primary
/// break (statements in flight never execute, their senders give up; a fence's transaction ends),
/// and the timeline grows by one. The row going back is not a token going back: the tokens the
/// properties follow are those handed out, which the new tenures must all be above.
fn failover(state: &mut State) {
    state.failovers += 1;
    if let Some(standby) = state.standby.take() {
        state.db.row = standby.row;
        state.db.seq = standby.seq;
        state.db.record = standby.record;
    }
    state.db.timeline += 1;
    state.inflight.clear();
    for proc in &mut state.procs {
        proc.fenced = None;
    }
}
