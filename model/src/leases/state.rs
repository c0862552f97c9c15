//! The state the checker explores: the processes, the statements in flight and their answers,
//! and the steps between states.

use super::db::Db;
use super::{Owner, Tick, Token};
use crate::failover::{Record, Timeline};

/// A statement as a process sends it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    /// Leases::acquire (managed, `raw` false) or a raw grant (`raw` true).
    Acquire { raw: bool },
    /// A managed lease's renewal.
    RenewTenure { token: Token },
    /// The raw batch renewal.
    Renew,
    /// A managed release (with its token) or a raw release by key (`None`).
    Release { token: Option<Token> },
    /// fence.sql inside the caller's transaction.
    Fence { token: Token },
    /// promotion.sql: the promotion record read (and a promotion recorded) before a grant.
    ReadRecord,
}

/// A statement in flight: sent (its transaction started at `now`), not executed yet.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Msg {
    pub proc: usize,
    /// Its sender no longer waits for it (gave up, or was killed): its answer is never read.
    pub orphan: bool,
    pub owner: Owner,
    pub op: Op,
    pub now: Tick,
    /// The promotion record a grant is sent with (`$7 $8 $9`).
    pub record: Record,
}

/// An answer on its way back.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Answer {
    pub proc: usize,
    /// Acquire/renew: the token (and renewal) or `None`; release: nothing to tell; fence: admitted.
    pub granted: Option<Token>,
    /// An acquire found the server on another timeline than its record names.
    pub stale: bool,
    /// The timeline of the server that executed the statement.
    pub timeline: Timeline,
    /// promotion.sql: the record read.
    pub record: Option<Record>,
}

/// What a holder holds and until when it believes it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Tenure {
    pub token: Token,
    pub raw: bool,
    /// Local instant (ticks) past which it no longer believes.
    pub deadline: Tick,
    /// The timeline of the server whose answer set the deadline: a belief from before a failover
    /// may outlast what the promoted standby received (the hold-off is what protects then).
    pub timeline: Timeline,
}

/// A process using the leases.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Proc {
    pub owner: Owner,
    pub raw: bool,
    pub tenure: Option<Tenure>,
    /// The statement it waits on and the local instant recorded before sending it.
    pub waiting: Option<(Op, Tick)>,
    /// Inside a user transaction whose fence admitted `token` (its FOR SHARE lock held).
    pub fenced: Option<Token>,
    /// The promotion record as its `Db` last read it (`None`: to be read before the next grant).
    pub record: Option<Record>,
}

impl Proc {
    pub(super) fn believes(&self, now: Tick) -> Option<&Tenure> {
        self.tenure.as_ref().filter(|tenure| now < tenure.deadline)
    }
}

/// The whole system: the database clock, the table, the processes and what is in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub now: Tick,
    pub db: Db,
    pub procs: Vec<Proc>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    pub restarts: u8,
    /// Tokens whose tenure an operator's force-release ended (their holders may still believe until
    /// their local deadline: the fence is what protects then).
    pub forced: Vec<Token>,
    /// The highest token any row ever had, and whether a row's token ever went back or a new tenure
    /// reused one.
    pub highest: Token,
    pub token_went_back: bool,
    /// What the standby has received, once its replication stopped (`None`: all of it).
    pub standby: Option<Standby>,
    pub failovers: u8,
}

/// The committed state a lagging standby has: the row, the sequence and the promotion record.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Standby {
    pub row: Option<super::Row>,
    pub seq: Token,
    pub record: Record,
}

/// One step: a statement executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Process `p` sends a statement.
    Send(usize, Op),
    /// The database executes in-flight statement `i`.
    Exec(usize),
    /// Answer `i` reaches its process.
    Deliver(usize),
    /// Process `p` stops waiting (answer late, lost, or the connection lost after the commit: the
    /// outcome is unknown); the statement may still execute.
    GiveUp(usize),
    /// Process `p`'s fenced transaction commits its write (and releases its FOR SHARE lock).
    Commit(usize),
    /// An operator or contender: supersede.sql, force_release.sql, a sweep.
    Supersede,
    ForceRelease,
    Sweep,
    /// Process `p` is killed and restarts as `owner`, raw or managed.
    Restart(usize, Owner, bool),
    /// The standby stops receiving WAL: every commit from now on is lost in a failover.
    Lag,
    /// The primary fails and the standby is promoted: the table, its sequence and its record go
    /// back to what the standby received, the timeline grows by one, statements in flight are lost
    /// (answers already sent still arrive), open transactions (a fence's) end.
    Failover,
}

/// Process `p`'s statements in flight are no longer waited for, and its answers never read.
pub(super) fn orphan(state: &mut State, p: usize) {
    for msg in &mut state.inflight {
        if msg.proc == p {
            msg.orphan = true;
        }
    }
    state.answers.retain(|a| a.proc != p);
}

/// Notes the row's token after a step that may have changed it (`before`: its token before): the
/// highest token seen, and whether a token went back or a new tenure reused one.
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
