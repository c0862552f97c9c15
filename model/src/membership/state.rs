//! The state the checker explores: the processes (local view, outbox, reconciler), the statements
//! in flight and their answers, and the steps between states.

use super::{Db, Pid, Tick, Token, UNITS};

/// A statement as it is sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    Heartbeat,
    /// claim.sql with this weight budget (the tick's deficit to its fair share).
    Claim(u8),
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
    /// Whether something forgot the ownership since it was sent (the watcher, a lapse): a claim's
    /// answer is then not adopted (`Local::unchanged_since`).
    pub forgot: bool,
}

/// One decision queued for the reconciler, about a unit.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Change {
    Gained(Token),
    /// Lost by a decision of its own (a shed, the release).
    Lost,
    /// Lost to the local deadline or a lapse (`UnitLoss::Expired`).
    Expired,
}

/// One decision queued for the reconciler: the unit and what changed.
pub type Delivery = (usize, Change);

/// What a membership loop knows of its reach to the database (`outage::Reach`), in ticks.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub enum Reach {
    /// Its statements are answered: nothing to defer.
    #[default]
    Reached,
    /// A statement failed for want of the database ([`Action::GiveUp`]): it claims, sheds and
    /// sweeps nothing until one is answered, and one heartbeat interval beyond.
    CutOff,
    /// Back from an outage (or its heartbeat found its row lapsed): it defers until this tick.
    Back(Tick),
}

/// A process: its leaser's local view, its outbox and what its reconciler was told.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Process {
    /// The local view: each unit's token while owned.
    pub owned: [Option<Token>; UNITS],
    /// The local liveness deadline by the last heartbeat that succeeded.
    pub deadline: Option<Tick>,
    pub waiting: Option<Wait>,
    /// Released and shutting down: it sends nothing more but the release.
    pub stopped: bool,
    /// Decisions queued for the reconciler, in decision order, not delivered yet.
    pub outbox: Vec<Delivery>,
    /// What the reconciler was told: each unit's token while it works it.
    pub told: [Option<Token>; UNITS],
    /// How many of the oldest queued messages the loop waits to see delivered before its next
    /// statement: those queued when it last delivered (`Leaser::deliver` returns once the queue
    /// is empty; what the watcher queues afterwards, it delivers on its own thread).
    pub barrier: u8,
    /// A give-back decided (a unit to shed, or the release), sent once its losses were delivered.
    pub pending: Option<Op>,
    /// Not running: a spare id not started yet, or a process killed for good (replaced by one
    /// under a new id).
    pub down: bool,
    /// Its warm-up is over: it has sent a claim since it started. `WarmUp` is over for good once
    /// a tick may claim, so from then on it claims whenever it counts, even in a cold fleet with
    /// another live process not settled yet (a restart starts a new warm-up).
    pub warm: bool,
    /// Its reach to the database (the outage rule; always `Reached` with it off).
    pub reach: Reach,
}

impl Process {
    /// `Leaser::defers`: back from an outage (or still cut off), its ticks claim, shed and sweep
    /// nothing at `now`.
    pub fn defers(&self, now: Tick) -> bool {
        match self.reach {
            Reach::Reached => false,
            Reach::CutOff => true,
            Reach::Back(until) => now < until,
        }
    }

    /// Live by the local deadline.
    pub fn live(&self, now: Tick) -> bool {
        self.deadline.is_some_and(|deadline| now < deadline)
    }

    /// The token of unit `u` while it believes it (the local view, which `Leaser::token` and the
    /// fence read): owned and live.
    pub fn believes(&self, u: usize, now: Tick) -> Option<Token> {
        self.owned[u].filter(|_| self.live(now))
    }

    /// The token of unit `u` while its reconciler works it (told gained, not told lost), live by
    /// the local deadline and with no expiry of it queued (the margin between the local deadline
    /// and the row's expiry is for delivering that: see the module docs).
    pub fn works(&self, u: usize, now: Tick) -> Option<Token> {
        let expired = (self.outbox.iter()).any(|&(v, change)| v == u && change == Change::Expired);
        self.told[u].filter(|_| self.live(now) && !expired)
    }

    /// Forgets every unit (a lapse, the watcher, the release): each queued lost as `why`, in unit
    /// order.
    pub(super) fn forget_all(&mut self, why: Change) {
        for u in 0..UNITS {
            if self.owned[u].take().is_some() {
                self.outbox.push((u, why));
            }
        }
        if let Some(wait) = &mut self.waiting {
            wait.forgot = true;
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
    /// A gain of a unit was delivered while its reconciler held it (no loss delivered between).
    pub gain_before_loss: bool,
    /// A unit was given back (shed, release) while its reconciler still worked it.
    pub given_back_while_worked: bool,
    /// A fenced transaction open: the process, the unit and the token fence.sql admitted.
    pub fenced: Option<(Pid, usize, Token)>,
    /// How many fenced transactions a run has begun.
    pub fences: u8,
    /// A fenced write committed after its unit changed hands (another owner or token).
    pub fenced_write_stale: bool,
}

/// One step: a statement sent or executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Process `p`'s membership loop sends a statement.
    Send(Pid, Op),
    /// Process `p`'s tick decides to give back (shed a unit, or release everything): its local
    /// view forgets the units and queues their losses; the statement follows once delivered.
    Decide(Pid, Op),
    /// Process `p` delivers the oldest queued decision to its reconciler.
    Flush(Pid),
    /// The database executes in-flight statement `i`.
    Exec(usize),
    /// Answer `i` reaches its process.
    Deliver(usize),
    /// Process `p` stops waiting (answer late, lost, or the connection lost after the commit);
    /// the statement may still execute.
    GiveUp(Pid),
    /// Process `p`'s liveness watcher: the local deadline passed, every unit is forgotten.
    Watch(Pid),
    /// Process `p`'s reconciler begins a transaction for unit `u` it works on and runs fence.sql
    /// in it with the token `Leaser::token` gives; admitted, the transaction stays open.
    Fence(Pid, usize),
    /// The open fenced transaction writes and commits.
    Commit,
    /// Process `p` is killed and restarts under the same id.
    Restart(Pid),
    /// Process `p` is killed for good and a process under a new id (the spare `q`) starts.
    Replace(Pid, Pid),
}
