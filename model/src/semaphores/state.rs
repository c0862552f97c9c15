//! The state the checker explores: the processes, the statements in flight and their answers,
//! and the steps between states.

use super::db::{Db, Pending};
use super::{Owner, Slot, Tick, Token};

/// A statement as a process sends it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// acquire.sql; `Some` once its first part executed (see [`Pending`]).
    Acquire(Option<Pending>),
    /// The permit's renewal (renew_tenure.sql).
    Renew { token: Token },
    /// The permit's release (release.sql with its token).
    Release { token: Token },
    /// fence.sql inside the caller's transaction.
    Fence { token: Token },
}

/// A statement in flight: sent (its transaction started at `now`), not executed yet.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Msg {
    pub proc: usize,
    /// Its sender no longer waits for it (gave up, or was killed): its answer is never read.
    pub orphan: bool,
    pub owner: Owner,
    pub op: Op,
    pub now: Tick,
}

/// An answer on its way back.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Answer {
    pub proc: usize,
    /// Acquire: `(slot, token)` when granted; renew, fence: the tenure's when renewed, admitted.
    pub granted: Option<(Slot, Token)>,
    /// Acquire: the answer says contended (the caller sends it again).
    pub contended: bool,
}

/// A held permit and until when its holder believes it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tenure {
    pub slot: Slot,
    pub token: Token,
    /// Local instant (ticks) past which it no longer believes.
    pub deadline: Tick,
}

/// A process using the semaphore.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Proc {
    pub owner: Owner,
    pub tenure: Option<Tenure>,
    /// The statement it waits on and the local instant recorded before sending it.
    pub waiting: Option<(Op, Tick)>,
    /// Inside a user transaction whose fence admitted `(slot, token)` (its FOR SHARE lock held).
    pub fenced: Option<(Slot, Token)>,
}

impl Proc {
    pub(super) fn idle(owner: Owner) -> Proc {
        Proc {
            owner,
            tenure: None,
            waiting: None,
            fenced: None,
        }
    }

    /// The permit it believes it holds at `now`, if any.
    pub fn believes(&self, now: Tick) -> Option<&Tenure> {
        self.tenure.as_ref().filter(|tenure| now < tenure.deadline)
    }
}

/// The whole system: the database clock, the table, the processes and what is in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct State {
    pub now: Tick,
    pub db: Db,
    pub procs: Vec<Proc>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    pub restarts: u8,
    /// The highest token any row ever had, and whether a row's token ever went back or a new
    /// tenure reused one.
    pub highest: Token,
    pub token_went_back: bool,
}

/// One step: a statement executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Process `p` sends a statement.
    Send(usize, Op),
    /// The database executes in-flight statement `i` (an acquire in two parts: up to its insert,
    /// then the insert).
    Exec(usize),
    /// Answer `i` reaches its process.
    Deliver(usize),
    /// Process `p` stops waiting (answer late, lost, or the connection lost after the commit: the
    /// outcome is unknown); the statement may still execute.
    GiveUp(usize),
    /// Process `p`'s fenced transaction commits its write (and releases its FOR SHARE lock).
    Commit(usize),
    /// The sweep deletes a lapsed slot's row.
    Sweep(Slot),
    /// Process `p` is killed and restarts as `owner`.
    Restart(usize, Owner),
}

impl State {
    /// The slots a fenced transaction holds `FOR SHARE`.
    pub(super) fn locked(&self) -> Vec<Slot> {
        self.procs
            .iter()
            .filter_map(|proc| proc.fenced.map(|(slot, _)| slot))
            .collect()
    }

    /// Whether the row carrying `token` is locked by a fenced transaction.
    pub(super) fn token_locked(&self, token: Token) -> bool {
        self.procs
            .iter()
            .any(|proc| proc.fenced.is_some_and(|(_, t)| t == token))
    }

    /// Process `p`'s statements in flight are no longer waited for, and its answers never read.
    pub(super) fn orphan(&mut self, p: usize) {
        for msg in &mut self.inflight {
            if msg.proc == p {
                msg.orphan = true;
            }
        }
        self.answers.retain(|a| a.proc != p);
    }

    /// Notes the rows' tokens after a step that may have changed them (`before`: the tokens
    /// before, by slot): the highest token seen, and whether a token went back or a new tenure
    /// reused one.
    pub(super) fn note_tokens(&mut self, before: &[Option<Token>]) {
        for (slot, row) in self.db.rows.iter().enumerate() {
            let Some(row) = row else { continue };
            if before[slot] != Some(row.token) && row.token <= self.highest {
                self.token_went_back = true;
            }
            self.highest = self.highest.max(row.token);
        }
    }

    pub(super) fn tokens(&self) -> Vec<Option<Token>> {
        self.db
            .rows
            .iter()
            .map(|row| row.as_ref().map(|row| row.token))
            .collect()
    }
}
