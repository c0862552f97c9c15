//! The steps: how each action changes the state.

use super::{
    Action, Answer, Change, Hole, Membership, Msg, Op, Pid, Process, Reach, State, Wait, UNITS,
};

impl Membership {
    /// The state after `action`; `None` when it changes nothing.
    pub(super) fn step(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => {
                state.now += 1;
                // A deferral that ended is no deferral (`Reach::defers` forgets it).
                for process in &mut state.processes {
                    if matches!(process.reach, Reach::Back(until) if until <= state.now) {
                        process.reach = Reach::Reached;
                    }
                }
            }
            Action::Send(p, op) => self.send(&mut state, p, op),
            Action::Decide(p, op) => self.decide(&mut state, p, op),
            Action::Flush(p) => flush(&mut state, p),
            Action::Exec(i) => self.exec(&mut state, i),
            Action::Deliver(i) => self.deliver(&mut state, i)?,
            Action::GiveUp(p) => {
                // A statement of the loop failed for want of the database: cut off (the release
                // is the shutdown's, not the loop's).
                let wait = state.processes[p as usize].waiting.take()?;
                if self.cut_off(p) && wait.op != Op::Release {
                    state.processes[p as usize].reach = Reach::CutOff;
                }
                orphan(&mut state, p);
            }
            Action::Watch(p) => state.processes[p as usize].forget_all(Change::Expired),
            Action::Fence(p, u) => self.fence(&mut state, p, u),
            Action::Commit => {
                if let Some((p, u, token)) = state.fenced.take() {
                    let unit = &state.db.units[u];
                    if unit.owner != Some(p) || unit.token != token {
                        state.fenced_write_stale = true;
                    }
                    state.db.locked = None;
                }
            }
            Action::Restart(p) => {
                state.interventions += 1;
                state.processes[p as usize] = Process::default();
                kill(&mut state, p);
            }
            Action::Replace(p, q) => {
                state.interventions += 1;
                state.processes[p as usize] = Process {
                    down: true,
                    ..Process::default()
                };
                kill(&mut state, p);
                state.processes[q as usize].down = false;
            }
        }
        Some(state)
    }

    /// Process `p`'s reconciler runs fence.sql for unit `u` with its token in a new transaction,
    /// at the clock now: admitted, the transaction stays open holding the unit's row (but with the
    /// hole); refused, it ends.
    fn fence(&self, state: &mut State, p: Pid, u: usize) {
        state.fences += 1;
        let Some(token) = state.processes[p as usize].believes(u, state.now) else {
            return;
        };
        if state.db.fence(state.now, p, u, token) {
            state.fenced = Some((p, u, token));
            if self.hole != Some(Hole::FenceWithoutLock) {
                state.db.locked = Some(u);
            }
        }
    }

    /// Process `p` decides to give back: a unit to shed is forgotten and queued lost (with the
    /// hole, only once the shed's answer arrives); a release forgets every unit, and the process
    /// then stops.
    fn decide(&self, state: &mut State, p: Pid, op: Op) {
        let process = &mut state.processes[p as usize];
        match op {
            Op::Shed(u) if self.hole != Some(Hole::ShedToldAfter) => {
                process.owned[u] = None;
                process.outbox.push((u, Change::Lost));
            }
            Op::Release => {
                state.interventions += 1;
                process.forget_all(Change::Lost);
                process.stopped = true;
            }
            _ => {}
        }
        process.pending = Some(op);
        process.barrier = process.outbox.len() as u8;
    }

    /// Process `p` sends `op`: its transaction starts now, and so does a heartbeat's deadline.
    fn send(&self, state: &mut State, p: Pid, op: Op) {
        if op == Op::Sweep {
            state.interventions += 1;
        }
        let process = &mut state.processes[p as usize];
        if matches!(op, Op::Claim(_)) {
            process.warm = true;
        }
        process.waiting = Some(Wait {
            op: op.clone(),
            sent: state.now,
            forgot: false,
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
            Op::Heartbeat => {
                let (lapsed, _) = state
                    .db
                    .heartbeat(msg.now, process, self.ttl, self.settle_after);
                Answer::Heartbeat { process, lapsed }
            }
            Op::Claim(budget) => {
                let units = state.db.claim(msg.now, process, UNITS, budget);
                for &(u, token) in &units {
                    if token <= state.highest[u] {
                        state.token_went_back = true;
                    }
                    state.highest[u] = state.highest[u].max(token);
                }
                Answer::Claim { process, units }
            }
            Op::Shed(u) => {
                let units = state.db.shed(msg.now, process, &[u]);
                given_back(state, process, &units);
                Answer::Shed { process, units }
            }
            Op::Release => {
                let units = state.db.release(process);
                given_back(state, process, &units);
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
        if let Some(period) = self.outage.filter(|_| self.cut_off(answer.process())) {
            // `Leaser::reached`: a heartbeat that found its row lapsed defers one interval from
            // now; any other answer ends a cut-off likewise (a tick's late read is not modelled).
            let lapsed = matches!(answer, Answer::Heartbeat { lapsed: true, .. });
            process.reach = match process.reach {
                Reach::Back(until) if lapsed && until > now + period => Reach::Back(until),
                _ if lapsed => Reach::Back(now + period),
                Reach::CutOff => Reach::Back(now + period),
                reach => reach,
            };
        }
        match answer {
            Answer::Heartbeat { lapsed, .. } => {
                // Leaser::heartbeat: lapsed by the database clock, or the answer came after the
                // previous local deadline: other processes may have claimed its units.
                if lapsed || process.deadline.is_none_or(|d| now >= d) {
                    process.forget_all(Change::Expired);
                }
                let at = if self.hole == Some(Hole::DeadlineAtAnswer) {
                    now
                } else {
                    wait.sent
                };
                process.deadline = Some(at + self.ttl);
            }
            Answer::Claim { units, .. } => {
                // Adopted only while still live and nothing forgot the ownership since the tick
                // read it (`Leaser::adopt`); else the units stay the row's, re-read later (not
                // modelled: only liveness is lost).
                if process.live(now) && !wait.forgot {
                    for (u, token) in units {
                        process.owned[u] = Some(token);
                        process.outbox.push((u, Change::Gained(token)));
                    }
                }
            }
            Answer::Shed { units, .. } => {
                process.pending = None;
                if self.hole == Some(Hole::ShedToldAfter) {
                    for u in units {
                        process.owned[u] = None;
                        process.outbox.push((u, Change::Lost));
                    }
                }
            }
            Answer::Done { .. } => {
                if wait.op == Op::Release {
                    process.pending = None;
                }
            }
        }
        // The loop delivers after a heartbeat and after a tick's claim (`Leaser::deliver`).
        if matches!(wait.op, Op::Heartbeat | Op::Claim(_)) {
            process.barrier = process.outbox.len() as u8;
        }
        Some(())
    }
}

/// Process `p` delivers its oldest queued decision to its reconciler.
fn flush(state: &mut State, p: Pid) {
    let process = &mut state.processes[p as usize];
    let (u, change) = process.outbox.remove(0);
    process.barrier = process.barrier.saturating_sub(1);
    process.told[u] = match change {
        Change::Gained(token) => {
            if process.told[u].is_some() {
                state.gain_before_loss = true;
            }
            Some(token)
        }
        Change::Lost | Change::Expired => None,
    };
}

/// Units given back by process `p`'s statement: its reconciler must have been told they were lost.
fn given_back(state: &mut State, p: Pid, units: &[usize]) {
    let process = &state.processes[p as usize];
    if units.iter().any(|&u| process.told[u].is_some()) {
        state.given_back_while_worked = true;
    }
}

/// Process `p` is killed: its fenced transaction aborts, and its statements are orphaned.
fn kill(state: &mut State, p: Pid) {
    if state.fenced.is_some_and(|(q, _, _)| q == p) {
        state.fenced = None;
        state.db.locked = None;
    }
    orphan(state, p);
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
