//! The semaphores protocol (`sql/semaphores/acquire.sql`, the lease statements a permit renews,
//! fences and releases with, and the permit's local steps around them).
//!
//! One key, N permits (slots 0 to N - 1), one row per slot. Time is discrete as in the leases
//! model ([`crate::leases`]): `State::now` is the database clock in ticks, every local monotonic
//! clock advances with it, a statement's transaction starts (its `now()`) when it is sent and it
//! executes at any later step, or never. Each statement executes atomically against the newest
//! rows, as READ COMMITTED's locking re-check makes it, except the acquire's insert of a missing
//! slot: the slot is chosen from the statement's snapshot and inserted later, so a concurrent
//! insert of the same slot makes the insert conflict and the answer say contended (the caller then
//! sends the acquire again). A fenced transaction's `FOR SHARE` lock makes the updates of its row
//! wait, and an acquire's `FOR UPDATE SKIP LOCKED` pass the row over.
//!
//! The step functions on [`Db`] are one statement each, the very code the differential test
//! (`tests/differential_semaphores.rs`) compares with the statements run against PostgreSQL.
//! Not modelled: a failover, an operator's force-release, acquires asking for different N.

mod actions;
mod db;
mod properties;
mod state;
mod step;

use stateright::{Model, Property};

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A fencing token.
pub type Token = u8;
/// An owner name (`0` = "a", `1` = "b", ... in the differential test).
pub type Owner = u8;
/// A permit's slot (and a number of permits).
pub type Slot = u8;

pub use self::db::{Acquired, Db, Hole, Pending, Row};
pub use self::state::{Action, Answer, Msg, Op, Proc, State, Tenure};

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Semaphores {
    /// Each process's owner name.
    pub procs: Vec<Owner>,
    /// N, the permits every acquire asks for.
    pub permits: Slot,
    pub ttl: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    pub max_inflight: usize,
    /// The most tokens the sequence hands out (every new tenure draws one, and so does an insert
    /// that conflicts).
    pub max_tokens: Token,
    pub max_restarts: u8,
    /// The processes (the first ones) that fence writes; the others only acquire, renew and
    /// release.
    pub fencers: usize,
    pub hole: Option<Hole>,
}

impl Semaphores {
    /// The bounds CI checks exhaustively for the cap: three processes contend for two permits,
    /// one statement in flight fleet-wide, no restart, the first process fencing its writes.
    pub fn ci() -> Semaphores {
        Semaphores {
            procs: vec![0, 1, 2],
            permits: 2,
            ttl: 2,
            max_now: 2,
            max_inflight: 1,
            max_tokens: 3,
            max_restarts: 0,
            fencers: 1,
            hole: None,
        }
    }

    /// The bounds CI checks exhaustively for racing statements: two processes contend for one
    /// permit with two statements in flight (two acquires racing for a slot, a statement executing
    /// after a later one), one restart, both fencing.
    pub fn pair() -> Semaphores {
        Semaphores {
            procs: vec![0, 1],
            permits: 1,
            max_inflight: 2,
            max_restarts: 1,
            fencers: 2,
            ..Semaphores::ci()
        }
    }
}

impl Model for Semaphores {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            // Room for one slot more than N, for Hole::SlotBoundOffByOne.
            db: Db::empty(self.permits as usize + 1),
            procs: self.procs.iter().map(|&owner| Proc::idle(owner)).collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            restarts: 0,
            highest: 0,
            token_went_back: false,
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
