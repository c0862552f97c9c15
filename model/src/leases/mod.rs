//! The leases protocol (`sql/leases/*.sql` and the managed lease's local steps around them).
//!
//! One key. Time is discrete: `State::now` is the database clock in ticks; every process's local
//! `Instant` advances with it (a host clock step moves the wall clock, which no ownership decision
//! reads, so local instants are modelled as the same monotonic ticks; clock *rate* drift is not
//! modelled). A statement's transaction starts when it is sent: its `now()` is the tick it was sent
//! at, and it executes (atomically, against the newest row, as READ COMMITTED re-checks) at any later
//! step, or never. Starting the transaction at the send is the tightest case for the properties: a
//! transaction that starts later only makes the database's expiry later than the sender's local
//! deadline, which is recorded at the send.
//!
//! Failover (`max_failovers`): the standby may stop receiving at any step (`Action::Lag`); a
//! failover then takes the table, its sequence and its promotion record back to what it received,
//! the timeline grows by one, statements in flight are lost and open transactions end. Grants are
//! sent as the library sends them: folded with the timeline and held off after a promotion
//! (acquire.sql's `$5`, `$6` true), with the promotion record the process last read
//! (`sql/schema/promotion.sql`, read again after a `stale` answer).
//!
//! The step functions on [`Db`] ([`Db::acquire`], [`Db::renew_tenure`], ...) are one statement each,
//! the very code the differential test (`tests/differential.rs`) compares with the statement in
//! `sql/leases/` run against PostgreSQL.

mod actions;
mod db;
mod properties;
mod state;
mod step;

use stateright::{Model, Property};

use crate::failover::Record;

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A fencing token.
pub type Token = u8;
/// An owner name (`0` = "a", `1` = "b" in the differential test).
pub type Owner = u8;

pub use self::db::{Acquired, Db, Hole, Row};
pub use self::state::{Action, Answer, Msg, Op, Proc, Standby, State, Tenure};

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Leases {
    /// Each process's owner name and whether it uses raw grants.
    pub procs: Vec<(Owner, bool)>,
    pub ttl: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    pub max_inflight: usize,
    /// The most tokens the sequence hands out (every new tenure draws one).
    pub max_tokens: Token,
    pub max_restarts: u8,
    /// How many failovers a run may have (each to a standby that may have stopped receiving at
    /// any earlier step).
    pub max_failovers: u8,
    pub operator: bool,
    pub hole: Option<Hole>,
    /// Lifts the assumption that a raw user waits for its release's outcome (see
    /// docs/reliability.md, "Model checking"): the checker then finds a counterexample.
    pub raw_gives_up_on_release: bool,
}

impl Leases {
    /// The bounds CI checks exhaustively.
    pub fn ci() -> Leases {
        Leases {
            procs: vec![(0, false), (1, false)],
            ttl: 2,
            max_now: 2,
            max_inflight: 2,
            max_tokens: 2,
            max_restarts: 1,
            max_failovers: 0,
            operator: true,
            hole: None,
            raw_gives_up_on_release: false,
        }
    }

    /// The bounds CI checks failover at: one failover, no restart, no operator (each of which
    /// multiplies the states several times).
    pub fn failover() -> Leases {
        Leases {
            max_failovers: 1,
            max_inflight: 1,
            max_restarts: 0,
            operator: false,
            ..Leases::ci()
        }
    }

    /// Deeper bounds, `PGTENURE_MODEL_DEPTH` ticks (for a release).
    pub fn deep(max_now: Tick) -> Leases {
        Leases {
            max_now,
            max_tokens: 3,
            ..Leases::ci()
        }
    }

    fn fence_lock(state: &State) -> Option<(usize, Token)> {
        state
            .procs
            .iter()
            .enumerate()
            .find_map(|(p, proc)| proc.fenced.map(|token| (p, token)))
    }
}

impl Model for Leases {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            db: Db::new(),
            procs: self
                .procs
                .iter()
                .map(|&(owner, raw)| Proc {
                    owner,
                    raw,
                    tenure: None,
                    waiting: None,
                    fenced: None,
                    record: Some(Record::seeded()),
                })
                .collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            restarts: 0,
            forced: Vec::new(),
            highest: 0,
            token_went_back: false,
            standby: None,
            failovers: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        self.offer(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        self.step(last, action)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.db.seq <= self.max_tokens + 1
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::properties()
    }
}
