//! The steps: how each action changes the state.

use super::{Action, Answer, Hole, Membership, Msg, Op, Pid, Process, State, Wait, UNITS};

impl Membership {
    /// The state after `action`; `None` when it changes nothing.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Send(p, op) => self.send(&mut state, p, op),
            Action::Exec(i) => self.exec(&mut state, i),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(p) => {
                state.processes[p as usize].waiting = None;
                orphan(&mut state, p);
            }
            Action::Watch(p) => state.processes[p as usize].forget_all(),
            Action::Restart(p) => {
                state.interventions += 1;
                state.processes[p as usize] = Process::default();
                orphan(&mut state, p);
            }
        }
        Some(state)
    }

    /// Process `p` sends `op`: its transaction starts now, and so does a heartbeat's deadline.
    fn send(&self, state: &mut State, p: Pid, op: Op) {
        if matches!(op, Op::Release | Op::Sweep) {
            state.interventions += 1;
        }
        let process = &mut state.processes[p as usize];
        match op {
            // Decided and told lost before the statement is sent.
            Op::Shed(u) if self.hole != Some(Hole::ShedToldAfter) => process.owned[u] = None,
            Op::Release => {
                // Every unit told lost (the outbox was empty) before release.sql is sent.
                process.forget_all();
                process.stopped = true;
            }
            _ => {}
        }
        process.waiting = Some(Wait {
            op: op.clone(),
            sent: state.now,
        });
        state.inflight.push(Msg {
            waited: true,
            process: p,
            op,
            now: state.now,
        });
    }

    /// The database executes in-flight statement `i`; its answer goes back unless nobody waits.
    fn exec(&self, state: &mut State, i: usize) {
        let msg = state.inflight.remove(i);
        let process = msg.process;
        let answer = match msg.op {
            Op::Heartbeat => Answer::Heartbeat {
                process,
                lapsed: state.db.heartbeat(msg.now, process, self.ttl),
            },
            Op::Claim => {
                let units = state.db.claim(msg.now, process, UNITS);
                for &(u, token) in &units {
                    if token <= state.highest[u] {
                        state.token_went_back = true;
                    }
                    state.highest[u] = state.highest[u].max(token);
                }
                Answer::Claim { process, units }
            }
            Op::Shed(u) => Answer::Shed {
                process,
                units: state.db.shed(msg.now, process, &[u]),
            },
            Op::Release => {
                state.db.release(process);
                Answer::Done { process }
            }
            Op::Sweep => {
                state.db.sweep(msg.now, self.cutoff);
                Answer::Done { process }
            }
        };
        if msg.waited {
            state.answers.push(answer);
        }
    }

    /// Answer `i` reaches its process; `None` when it no longer waits for one.
    fn deliver(&self, state: &mut State, i: usize) -> Option<()> {
        let answer = state.answers.remove(i);
        let now = state.now;
        let process = &mut state.processes[answer.process() as usize];
        let wait = process.waiting.take()?;
        match answer {
            Answer::Heartbeat { lapsed, .. } => {
                // Leaser::heartbeat: lapsed by the database clock, or the answer came after the
                // previous local deadline: other processes may have claimed its units.
                if lapsed || process.deadline.is_none_or(|d| now >= d) {
                    process.forget_all();
                }
                let at = if self.hole == Some(Hole::DeadlineAtAnswer) {
                    now
                } else {
                    wait.sent
                };
                process.deadline = Some(at + self.ttl);
            }
            Answer::Claim { units, .. } => {
                for (u, token) in units {
                    // Told gained at once (the outbox is delivered right after the decision).
                    if process.owned[u].is_some() {
                        state.gain_before_loss = true;
                    }
                    process.owned[u] = Some(token);
                }
            }
            Answer::Shed { units, .. } => {
                if self.hole == Some(Hole::ShedToldAfter) {
                    for u in units {
                        process.owned[u] = None;
                    }
                }
            }
            Answer::Done { .. } => {}
        }
        Some(())
    }
}

/// Process `p`'s statements in flight are no longer waited for, and its answers never read.
fn orphan(state: &mut State, p: Pid) {
    for msg in &mut state.inflight {
        if msg.process == p {
            msg.waited = false;
        }
    }
    state.answers.retain(|answer| answer.process() != p);
}
