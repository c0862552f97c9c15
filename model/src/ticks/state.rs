//! The state the checker explores: the schedulers, the statements in flight and their answers, and
//! what happened so far (for the properties).

use super::db::{Claimed, Db};
use super::{ClaimId, Owner, Tick, Token};

/// A statement as a scheduler sends it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    /// claim.sql for `tick` with the call's random id (the same id when sent again).
    Claim {
        tick: Tick,
        id: ClaimId,
    },
    Extend {
        token: Token,
    },
    Release {
        token: Token,
    },
    Fence {
        token: Token,
    },
}

/// A statement in flight: sent, not executed yet (its `now()` is any step from `sent` to its
/// execution).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Msg {
    pub proc: usize,
    /// The step it was sent at: its transaction starts no earlier.
    pub sent: Tick,
    /// Its sender no longer waits for it: its answer is never read.
    pub orphan: bool,
    pub owner: Owner,
    pub op: Op,
}

/// An answer on its way back.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Answer {
    Claim(usize, Claimed),
    /// extend.sql's or fence.sql's: whether it matched.
    Matched(usize, bool),
}

impl Answer {
    pub(super) fn proc(&self) -> usize {
        match self {
            Answer::Claim(p, _) | Answer::Matched(p, _) => *p,
        }
    }
}

/// What a scheduler waits on, and the local instant (ticks) recorded before its first send.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Wait {
    Claim { tick: Tick, id: ClaimId, sent: Tick },
    Extend { sent: Tick },
    Fence,
}

/// A run in progress: its tick, its claim's token, and the local instant it stops by.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Run {
    pub tick: Tick,
    pub token: Token,
    pub deadline: Tick,
}

/// An instance's scheduler, with its one job.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Proc {
    pub owner: Owner,
    /// Its host clock minus the database clock: what it believes the database clock reads is
    /// `now + skew` (its offset estimate went stale when the host clock stepped).
    pub skew: Tick,
    /// The first tick it would claim next (`JobState`'s next tick; 0 before its first look).
    pub next: Tick,
    pub waiting: Option<Wait>,
    pub run: Option<Run>,
    /// Inside a run's transaction whose fence admitted `token` (its FOR SHARE lock held).
    pub fenced: Option<Token>,
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The database clock (and every local monotonic clock), in ticks.
    pub now: Tick,
    pub db: Db,
    pub procs: Vec<Proc>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    /// Claim ids handed out so far (the next one is this plus one).
    pub claim_ids: ClaimId,
    pub restarts: u8,
    pub clock_steps: u8,
    pub resends: u8,
    /// Ticks whose run began (sorted), and whether one began twice or before it was due.
    pub ran: Vec<Tick>,
    pub ran_twice: bool,
    pub ran_early: bool,
    /// The highest token any row ever had, and whether a row's token went back or repeated.
    pub highest: Token,
    pub token_went_back: bool,
}

/// One step: a statement executed, a scheduler's local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick; a run whose local deadline
    /// is reached stops (the job honours `Run::deadline`) and its claim is released.
    Tick,
    /// Scheduler `p`'s host clock steps by the amount (forward or back).
    StepClock(usize, Tick),
    /// Scheduler `p` looks at the job by its host clock and sends the claim of the tick due.
    Claim(usize),
    /// The connection failed after scheduler `p`'s claim was sent (it may have committed): the
    /// claim is sent again with the same claim id.
    Resend(usize),
    /// Scheduler `p`'s run sends an extension of its busy period (keep_busy).
    Extend(usize),
    /// Scheduler `p`'s run fences a write.
    Fence(usize),
    /// Scheduler `p`'s fenced transaction commits its write.
    Commit(usize),
    /// Scheduler `p`'s run ends; its claim's release is sent.
    End(usize),
    /// The database executes in-flight statement `i` with `now()` = the tick given (from its send
    /// to the current tick: when its transaction started).
    Exec(usize, Tick),
    /// Answer `i` reaches its scheduler.
    Deliver(usize),
    /// Scheduler `p` stops waiting (an answer late or lost: an error); the statement may still
    /// execute.
    GiveUp(usize),
    /// Scheduler `p` is killed (its run with it) and restarts under its own owner name (`false`) or
    /// a new one (`true`: an owner no scheduler had, so it no longer recognises claims made under
    /// its old name).
    Restart(usize, bool),
}

/// Process `p`'s statements in flight are no longer waited for, and its answers never read.
pub(super) fn orphan(state: &mut State, p: usize) {
    for msg in &mut state.inflight {
        if msg.proc == p {
            msg.orphan = true;
        }
    }
    state.answers.retain(|a| a.proc() != p);
}

/// Notes the row's token after a step that may have changed it (`before`: its token before).
pub(super) fn note_token(state: &mut State, before: Option<Token>) {
    if let Some(row) = &state.db.row {
        if before.is_some_and(|before| row.token < before)
            || (before != Some(row.token) && row.token <= state.highest && state.highest > 0)
        {
            state.token_went_back = true;
        }
        state.highest = state.highest.max(row.token);
    }
}
