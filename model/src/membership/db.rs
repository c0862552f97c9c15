//! The processes and units tables, the units' token sequence, and the statements of
//! `sql/membership/` as step functions, one statement each.

use super::{Pid, Tick, Token, UNITS, WEIGHTS};

/// A unit's row (never removed: registration and removal are not modelled; its weight is
/// [`WEIGHTS`](super::WEIGHTS)).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Unit {
    /// `process_id`.
    pub owner: Option<Pid>,
    /// `token`: the fencing token of its latest claim; `0` is NULL (never claimed).
    pub token: Token,
    pub claimed_at: Option<Tick>,
}

/// A process's row.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    pub expires_at: Tick,
    /// `started_at`: the `now()` of the beat that inserted it.
    pub started_at: Tick,
    /// `settled`: it has shown it stays (heartbeat.sql), so it counts in the fair share.
    pub settled: bool,
}

/// Both tables and the token sequence.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    /// Each process's row, by process id; `None` when there is none.
    pub processes: Vec<Option<Row>>,
    pub units: [Unit; UNITS],
    /// The value the sequence's next `nextval` returns.
    pub seq: Token,
    /// The unit whose row a fenced transaction holds `FOR SHARE` (fence.sql), if any: claim.sql,
    /// shed.sql and sweep.sql skip it (`SKIP LOCKED`), release.sql waits for it.
    pub locked: Option<usize>,
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
    /// A unit chosen to shed is given back (shed.sql sent) before its loss was delivered to the
    /// reconciler, which still works it while another process claims it.
    ShedBeforeTold,
    /// fence.sql checks the unit without locking its row: a fenced write may commit after the
    /// unit changed hands.
    FenceWithoutLock,
}

impl Db {
    /// An empty database for `processes` processes.
    pub fn new(processes: usize) -> Db {
        Db {
            processes: vec![None; processes],
            units: Default::default(),
            seq: 1,
            locked: None,
        }
    }

    /// Whether process `p`'s row is live at `now`.
    pub fn live(&self, now: Tick, p: Pid) -> bool {
        self.processes[p as usize].is_some_and(|row| row.expires_at > now)
    }

    /// The weight of the units the units table says `p` owns (what its row reports: every claim,
    /// shed and release updates the count in the same statement).
    pub fn weight_of(&self, p: Pid) -> u8 {
        (0..UNITS)
            .filter(|&u| self.units[u].owner == Some(p))
            .map(|u| WEIGHTS[u])
            .sum()
    }

    /// heartbeat.sql at `now` for process `p` (with probation: a new row is not settled; a later
    /// beat settles it once it is `settle_after` old): whether its row had lapsed (expired, or
    /// missing), and whether it is settled now.
    pub fn heartbeat(&mut self, now: Tick, p: Pid, ttl: Tick, settle_after: Tick) -> (bool, bool) {
        let previous = self.processes[p as usize];
        let lapsed = previous.is_none_or(|row| row.expires_at <= now);
        let row = match previous {
            None => Row {
                expires_at: now + ttl,
                started_at: now,
                settled: false,
            },
            Some(row) => Row {
                expires_at: row.expires_at.max(now + ttl),
                started_at: row.started_at,
                settled: row.settled || row.started_at <= now - settle_after,
            },
        };
        self.processes[p as usize] = Some(row);
        (lapsed, row.settled)
    }

    /// claim.sql at `now` for process `p`, up to `most` units and about `budget` weight (units
    /// are taken while the weight taken before each is below the budget): only while its row is
    /// live; units of expired processes first, then unowned ones; each with a new token. The
    /// units claimed and their tokens.
    pub fn claim(&mut self, now: Tick, p: Pid, most: usize, budget: u8) -> Vec<(usize, Token)> {
        if !self.live(now, p) {
            return Vec::new();
        }
        let orphaned = |unit: &Unit| {
            unit.owner.is_some_and(|q| {
                self.processes[q as usize].is_some_and(|row| row.expires_at <= now)
            })
        };
        let mut candidates: Vec<usize> = (0..UNITS).filter(|&u| orphaned(&self.units[u])).collect();
        candidates.extend((0..UNITS).filter(|&u| self.units[u].owner.is_none()));
        candidates.retain(|&u| self.locked != Some(u));
        candidates.truncate(most);
        let mut running = 0;
        candidates.retain(|&u| {
            let before = running;
            running += WEIGHTS[u];
            before < budget
        });
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

    /// shed.sql at `now` for process `p` and `units`: owner-guarded, only while its row is live,
    /// skipping a locked unit. The units given back.
    pub fn shed(&mut self, now: Tick, p: Pid, units: &[usize]) -> Vec<usize> {
        if !self.live(now, p) {
            return Vec::new();
        }
        let given: Vec<usize> = units
            .iter()
            .copied()
            .filter(|&u| self.units[u].owner == Some(p) && self.locked != Some(u))
            .collect();
        for &u in &given {
            self.free(u);
        }
        given
    }

    /// release.sql for process `p`, keeping nothing: every unit it owns is given back (once no
    /// fenced transaction holds one: it waits for the lock).
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
    /// frees their units, and units of a missing process claimed before it, but a locked one.
    /// (processes, units).
    pub fn sweep(&mut self, now: Tick, cutoff: Tick) -> (usize, usize) {
        let before = now - cutoff;
        let mut dead = vec![false; self.processes.len()];
        for (p, row) in self.processes.iter_mut().enumerate() {
            if row.is_some_and(|row| row.expires_at < before) {
                *row = None;
                dead[p] = true;
            }
        }
        let mut freed = 0;
        for u in 0..UNITS {
            let unit = &self.units[u];
            let Some(owner) = unit.owner.filter(|_| self.locked != Some(u)) else {
                continue;
            };
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
