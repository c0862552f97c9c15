//! The leader election protocol (`sql/elector/*.sql` and the campaign's local steps around them:
//! `src/elector/poll.rs`, `resign.rs`, `campaigner.rs`).
//!
//! One fleet, two campaigning members. Time is discrete, as in the leases model: `State::now` is
//! the database clock in ticks, and every member's local `Instant` advances with it. A statement's
//! transaction starts when it is sent (its `now()` is the tick it was sent at) and it executes
//! atomically against the newest row at any later step, or never. A member records its local
//! instant before sending a poll; a poll that wins or renews makes its local deadline that instant
//! plus the TTL.
//!
//! A member is the elector's `KnownTenure` (term, deadline, the term waiting to be resigned, and
//! whether it stood down while a poll was in flight) and the campaign's state (the term announced
//! `Elected` and not yet `Lost`, stopped). Its campaign thread waits on one statement at a time; its
//! watcher, `Leadership::stop` and `Elector::resign` act beside it, on other threads.
//!
//! Failover (`max_failovers`) as in the leases model: polls are folded with the timeline and held
//! off after a promotion (is_leader.sql's `$5`, `$6` true). A clone of the first member's elector
//! (`clone`: `Elector::clone`, which shares the tenure) calls `Elector::is_leader` beside the
//! campaign, on a thread of its own.
//!
//! A leading member's user may run `fence.sql` in a transaction of its own (`max_fences` per run,
//! [`Action::Fence`]): admitted, its FOR SHARE lock is held until its write commits
//! ([`Action::Commit`], at any later step) or the member is killed or the primary fails over, and
//! every statement that would update the row waits for it.
//!
//! The outage rule (`outage`, `src/outage.rs`): the last member's poll given up
//! ([`Action::GiveUp`], a connection failure or a timeout) cuts its campaign off; unless the leader
//! it last saw was itself, it then only reads who leads (leader.sql, [`Op::Observe`], which takes
//! nothing) until one retry period after its next answer.
//!
//! The step functions on [`Db`] ([`Db::is_leader`], [`Db::resign`], [`Db::request_resign`],
//! [`Db::fence`]) are one statement each, the very code the differential test
//! (`tests/differential_elector.rs`) compares with the statement in `sql/elector/` run against
//! PostgreSQL.

mod actions;
mod db;
mod properties;
mod state;
mod step;

use stateright::{Model, Property};

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A term.
pub type Term = u8;
/// A holder name (`0` = "a", `1` = "b", `2` = "c" in the differential test).
pub type Holder = u8;

pub use self::db::{Db, Hole, PollAnswer, Row};
pub use self::state::{Action, Answer, Member, Msg, Op, Reach, Standby, State, Wait};

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Election {
    /// Each member's holder name.
    pub members: Vec<Holder>,
    pub ttl: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    pub max_inflight: usize,
    /// The most terms the sequence hands out (every new tenure draws one).
    pub max_terms: Term,
    /// How many interventions a run may have, of the kinds enabled below: each multiplies the
    /// state space several times.
    pub max_interventions: u8,
    /// A kill and restart of the last member (under its own holder name, the first member's, or
    /// a new one).
    pub restarts: bool,
    /// `Leadership::stop` on a member.
    pub stops: bool,
    /// `Elector::resign` on a member's campaigning elector.
    pub resigns: bool,
    /// request_resign.sql, by an operator or a member.
    pub requests: bool,
    /// How many failovers a run may have (each to a standby that may have stopped receiving at
    /// any earlier step).
    pub max_failovers: u8,
    /// A clone of the first member's elector (`Elector::clone`: the same tenure) calls
    /// `Elector::is_leader` beside its campaign.
    pub clone: bool,
    /// A poll answered `ended` (asked to step down) makes every other poll of the tenure in flight
    /// (a clone's) not led on, as a resignation does, as the library does since the clone check
    /// found the hole (see docs/reliability.md, "Model checking"). Off: the hole reintroduced,
    /// the library before the fix.
    pub ended_stands_down: bool,
    /// How many fenced transactions a run may begin (one at a time per member).
    pub max_fences: u8,
    /// The outage rule (`src/outage.rs`), as the library has it, on the last member: its
    /// campaign cut off from the database (a poll given up: [`Action::GiveUp`], the model's
    /// connection failure or timeout) that was not the leader it last saw only observes
    /// (leader.sql, [`Op::Observe`]) until one retry period (`Some(ticks)`) after its next answer.
    /// The other members poll where the library would only observe: a read takes nothing, so
    /// their steps include the library's (and following who each saw lead would multiply the
    /// states past what CI affords). `None`: the rule off.
    pub outage: Option<Tick>,
    pub hole: Option<Hole>,
}

impl Election {
    /// The bounds CI checks exhaustively.
    pub fn ci() -> Election {
        Election {
            members: vec![0, 1],
            ttl: 2,
            max_now: 2,
            max_inflight: 2,
            max_terms: 2,
            max_interventions: 1,
            restarts: true,
            stops: true,
            resigns: true,
            requests: true,
            max_failovers: 0,
            clone: false,
            ended_stands_down: true,
            max_fences: 0,
            outage: Some(1),
            hole: None,
        }
    }

    /// The bounds CI checks failover at: one failover, no intervention (each multiplies the
    /// states several times).
    pub fn failover() -> Election {
        Election {
            max_failovers: 1,
            max_inflight: 1,
            max_interventions: 0,
            ..Election::ci()
        }
    }

    /// The bounds CI checks a clone polling beside the campaign at: one intervention, a request
    /// to resign, no tick (kills, stops, `Elector::resign` and each tick multiply the states past
    /// what CI affords; `PGTENURE_MODEL_DEPTH` checks more ticks).
    pub fn clones() -> Election {
        Election {
            clone: true,
            max_now: 0,
            restarts: false,
            stops: false,
            resigns: false,
            ..Election::ci()
        }
    }

    /// The bounds CI checks a fenced transaction at: one fence per run, no intervention (the
    /// fence's lock is what keeps a fenced write's term current until it commits).
    pub fn fenced() -> Election {
        Election {
            max_fences: 1,
            max_interventions: 0,
            ..Election::ci()
        }
    }

    /// Deeper bounds, `PGTENURE_MODEL_DEPTH` ticks and `interventions` per run (for a release).
    pub fn deep(max_now: Tick, interventions: u8) -> Election {
        Election {
            max_now,
            max_terms: max_now.max(2) as Term,
            max_interventions: interventions,
            ..Election::ci()
        }
    }
}

impl Election {
    /// Whether member `m` follows the outage rule (see [`Election::outage`]).
    fn cut_off(&self, m: usize) -> bool {
        self.outage.is_some() && m + 1 == self.members.len()
    }
}

impl Model for Election {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            db: Db::new(),
            members: self
                .members
                .iter()
                .map(|&holder| Member::new(holder))
                .collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            interventions: 0,
            highest: 0,
            term_went_back: false,
            elected: 0,
            elected_went_back: false,
            gain_before_loss: false,
            standby: None,
            failovers: 0,
            fences: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.offer(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.step(last, action)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.db.seq <= self.max_terms + 1
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::properties()
    }
}
