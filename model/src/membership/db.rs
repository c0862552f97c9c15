//! The processes and units tables, the units' token sequence, and the statements of
//! `sql/membership/` as step functions, one statement each.

use super::{Pid, Tick, Token, UNITS};

/// A unit's row (weight 1, never removed: registration and weights are not modelled).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Unit {
    /// `process_id`.
    pub owner: Option<Pid>,
    /// `token`: the fencing token of its latest claim; `0` is NULL (never claimed).
    pub token: Token,
    pub claimed_at: Option<Tick>,
}

/// Both tables and the token sequence.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    /// Each process's row (`expires_at`), by process id; `None` when there is none.
    pub processes: Vec<Option<Tick>>,
    pub units: [Unit; UNITS],
    /// The value the sequence's next `nextval` returns.
    pub seq: Token,
}

/// Known holes, reintroduced one at a time to show the checker finds them. `None` in the real
/// model and always in the differential test.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hole {
    /// A shed unit is told lost when the shed's answer arrives, not before the statement is sent:
    /// the reconciler still works it while another process claims it (and a lost answer never
    /// tells it at all, so the next gain of it comes with no loss before it).
    ShedToldAfter,
    /// The local deadline is recorded when the heartbeat's answer arrives instead of before
    /// sending.
    DeadlineAtAnswer,
}

impl Db {
    /// An empty database for `processes` processes.
    pub fn new(processes: usize) -> Db {
        Db {
            processes: vec![None; processes],
            units: Default::default(),
            seq: 1,
        }
    }

    fn live(&self, now: Tick, p: Pid) -> bool {
        self.processes[p as usize].is_some_and(|expires_at| expires_at > now)
    }

    /// heartbeat.sql at `now` for process `p`: whether its row had lapsed (expired, or missing).
    pub fn heartbeat(&mut self, now: Tick, p: Pid, ttl: Tick) -> bool {
        let previous = self.processes[p as usize];
        let lapsed = previous.is_none_or(|expires_at| expires_at <= now);
        self.processes[p as usize] = Some(previous.map_or(now + ttl, |e| e.max(now + ttl)));
        lapsed
    }

    /// claim.sql at `now` for process `p`, up to `most` units (the weight budget is not
    /// modelled: every unit weighs 1): only while its row is live; units of expired processes
    /// first, then unowned ones; each with a new token. The units claimed and their tokens.
    pub fn claim(&mut self, now: Tick, p: Pid, most: usize) -> Vec<(usize, Token)> {
        if !self.live(now, p) {
            return Vec::new();
        }
        let orphaned = |unit: &Unit| {
            unit.owner.is_some_and(|q| {
                self.processes[q as usize].is_some_and(|expires_at| expires_at <= now)
            })
        };
        let mut candidates: Vec<usize> = (0..UNITS).filter(|&u| orphaned(&self.units[u])).collect();
        candidates.extend((0..UNITS).filter(|&u| self.units[u].owner.is_none()));
        candidates.truncate(most);
        candidates
            .into_iter()
            .map(|u| {
                let token = (self.units[u].token + 1).max(self.seq);
                self.seq += 1;
                self.units[u] = Unit {
                    owner: Some(p),
                    token,
                    claimed_at: Some(now),
                };
                (u, token)
            })
            .collect()
    }

    /// shed.sql at `now` for process `p` and `units`: owner-guarded, only while its row is live.
    /// The units given back.
    pub fn shed(&mut self, now: Tick, p: Pid, units: &[usize]) -> Vec<usize> {
        if !self.live(now, p) {
            return Vec::new();
        }
        let given: Vec<usize> = units
            .iter()
            .copied()
            .filter(|&u| self.units[u].owner == Some(p))
            .collect();
        for &u in &given {
            self.free(u);
        }
        given
    }

    /// release.sql for process `p`, keeping nothing: every unit it owns is given back.
    pub fn release(&mut self, p: Pid) -> Vec<usize> {
        let given: Vec<usize> = (0..UNITS)
            .filter(|&u| self.units[u].owner == Some(p))
            .collect();
        for &u in &given {
            self.free(u);
        }
        given
    }

    /// sweep.sql at `now` with `cutoff`: deletes process rows expired before `now - cutoff` and
    /// frees their units, and units of a missing process claimed before it. (processes, units).
    pub fn sweep(&mut self, now: Tick, cutoff: Tick) -> (usize, usize) {
        let before = now - cutoff;
        let mut dead = vec![false; self.processes.len()];
        for (p, row) in self.processes.iter_mut().enumerate() {
            if row.is_some_and(|expires_at| expires_at < before) {
                *row = None;
                dead[p] = true;
            }
        }
        let mut freed = 0;
        for u in 0..UNITS {
            let unit = &self.units[u];
            let Some(owner) = unit.owner else { continue };
            let stray = !dead[owner as usize]
                && self.processes[owner as usize].is_none()
                && unit.claimed_at.is_some_and(|at| at < before);
            if dead[owner as usize] || stray {
                self.free(u);
                freed += 1;
            }
        }
        (dead.iter().filter(|&&d| d).count(), freed)
    }

    /// fence.sql at `clock` (its `clock_timestamp()`): whether it admits process `p` for unit `u`
    /// with `token`.
    pub fn fence(&self, clock: Tick, p: Pid, u: usize, token: Token) -> bool {
        let unit = &self.units[u];
        unit.owner == Some(p) && unit.token == token && self.live(clock, p)
    }

    fn free(&mut self, u: usize) {
        self.units[u].owner = None;
        self.units[u].claimed_at = None;
    }
}
