//! The state the checker explores: the processes (local view, outbox, reconciler), the statements
//! in flight and their answers, and the steps between states.

use super::{Db, Pid, Tick, Token, UNITS};

/// A statement as it is sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    Heartbeat,
    Claim,
    /// shed.sql for one unit.
    Shed(usize),
    /// release.sql keeping nothing (graceful shutdown): the process then stops.
    Release,
    Sweep,
}

/// A statement in flight: sent (its transaction started at `now`), not executed yet.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Msg {
    /// Whether its process still waits for the answer (not once it gave up or was killed).
    pub waited: bool,
    pub process: Pid,
    pub op: Op,
    pub now: Tick,
}

/// An answer on its way back to its process.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Answer {
    Heartbeat {
        process: Pid,
        lapsed: bool,
    },
    Claim {
        process: Pid,
        units: Vec<(usize, Token)>,
    },
    Shed {
        process: Pid,
        units: Vec<usize>,
    },
    Done {
        process: Pid,
    },
}

impl Answer {
    pub(super) fn process(&self) -> Pid {
        match self {
            Answer::Heartbeat { process, .. }
            | Answer::Claim { process, .. }
            | Answer::Shed { process, .. }
            | Answer::Done { process } => *process,
        }
    }
}

/// The statement a process's membership loop waits on.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Wait {
    pub op: Op,
    /// The local instant recorded before sending (a heartbeat's deadline is this plus the TTL).
    pub sent: Tick,
}

/// A process: its leaser's local view, its outbox and what its reconciler was told.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Process {
    /// The local view, which is what the reconciler was told (every decision is told in decision
    /// order right after it is made, through the outbox): each unit's token while owned.
    pub owned: [Option<Token>; UNITS],
    /// The local liveness deadline by the last heartbeat that succeeded.
    pub deadline: Option<Tick>,
    pub waiting: Option<Wait>,
    /// Released and shutting down: it sends nothing more.
    pub stopped: bool,
}

impl Process {
    /// Live by the local deadline.
    pub fn live(&self, now: Tick) -> bool {
        self.deadline.is_some_and(|deadline| now < deadline)
    }

    /// The token of unit `u` while it believes (works) it: owned and live.
    pub fn believes(&self, u: usize, now: Tick) -> Option<Token> {
        self.owned[u].filter(|_| self.live(now))
    }

    /// Forgets every unit (a lapse, or the local deadline passed): told lost.
    pub(super) fn forget_all(&mut self) {
        for u in 0..UNITS {
            self.owned[u] = None;
        }
    }
}

/// The whole system: the database clock, the tables, the processes and what is in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub now: Tick,
    pub db: Db,
    pub processes: Vec<Process>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    /// How many interventions were used: kill and restart, sweep, release.
    pub interventions: u8,
    /// The highest token each unit ever had, and whether one went back or repeated.
    pub highest: [Token; UNITS],
    pub token_went_back: bool,
    /// A gain of a unit was told while its reconciler held it (no loss told between).
    pub gain_before_loss: bool,
}

/// One step: a statement sent or executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Process `p`'s membership loop sends a statement.
    Send(Pid, Op),
    /// The database executes in-flight statement `i`.
    Exec(usize),
    /// Answer `i` reaches its process.
    Deliver(usize),
    /// Process `p` stops waiting (answer late, lost, or the connection lost after the commit);
    /// the statement may still execute.
    GiveUp(Pid),
    /// Process `p`'s liveness watcher: the local deadline passed, every unit is forgotten.
    Watch(Pid),
    /// Process `p` is killed and restarts under the same id.
    Restart(Pid),
}
