//! Tick claims and the scheduler (`sql/tick_claims/*.sql`, `src/tick_claims/`, `src/schedule/`).
//!
//! One job, ticks `0..=max_tick` of a period of one tick: tick `k` is due at `k` by the database
//! clock. Time is discrete: `State::now` is the database clock; every scheduler's monotonic clock
//! advances with it, and its host clock reads `now + skew`, a skew the environment steps forward
//! or back (the scheduler's offset estimate goes stale until it learns it again). A statement's
//! `now()` is any step from its send to its execution: the server starts its one-statement
//! transaction when the statement arrives, which may be long before it executes (it waits for a
//! fence's `FOR SHARE` lock, or another transaction's row lock, with its `now()` fixed). Its
//! sender recorded its local instant before the first send, so the local deadline (that instant
//! plus the busy period) is at most the `busy_until` the claim wrote.
//!
//! The scheduler's steps: look at the job by its host clock and claim the latest tick due (a tick
//! it has not passed over), with a fresh claim id and lead 0 (`Scheduler::attempt`); on a won
//! answer run it, extend its busy period while it runs, fence its writes, end it and release. A
//! run stops by its local deadline (the job honours `Run::deadline`: modelled as the clock not
//! passing it while it runs). Refused: the next tick; not yet due: the same tick again; an error
//! (the answer lost): the same tick again with a new claim id. The environment: answers late or
//! never, the connection lost after the commit and the claim resent with the same claim id,
//! pauses (any interleaving), host clock steps, kill and restart under the same owner name or a
//! new one (the default: each process draws a fresh name).
//!
//! The step functions on [`Db`] are one statement each, the code the differential test
//! (`tests/differential_ticks.rs`) compares with the statements run against PostgreSQL.

mod actions;
mod db;
mod properties;
mod state;
mod step;

use stateright::{Model, Property};

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A fencing token (the job's claim counter).
pub type Token = u8;
/// An owner name (`0` = "a", `1` = "b" in the differential test).
pub type Owner = u8;
/// A claim call's random id.
pub type ClaimId = u8;

pub use self::db::{Claim, Claimed, Db, Hole, Row};
pub use self::state::{Action, Answer, Msg, Op, Proc, Run, State, Wait};

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Ticks {
    pub procs: usize,
    /// The last tick of the schedule.
    pub max_tick: Tick,
    /// The busy period (`busy_for`) in ticks.
    pub busy: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    /// How far a host clock may be off the database clock, either way.
    pub max_skew: Tick,
    pub max_clock_steps: u8,
    pub max_inflight: usize,
    pub max_claim_ids: ClaimId,
    pub max_resends: u8,
    pub max_restarts: u8,
    pub hole: Option<Hole>,
}

impl Ticks {
    /// The bounds CI checks exhaustively.
    pub fn ci() -> Ticks {
        Ticks {
            procs: 2,
            max_tick: 1,
            busy: 2,
            max_now: 2,
            max_skew: 1,
            max_clock_steps: 1,
            max_inflight: 2,
            max_claim_ids: 2,
            max_resends: 1,
            max_restarts: 1,
            hole: None,
        }
    }

    /// Deeper bounds, `PGTENURE_MODEL_DEPTH` ticks (for a release).
    pub fn deep(max_now: Tick) -> Ticks {
        Ticks {
            max_now,
            max_claim_ids: 3,
            ..Ticks::ci()
        }
    }

    fn fence_lock(state: &State) -> bool {
        state.procs.iter().any(|proc| proc.fenced.is_some())
    }
}

impl Model for Ticks {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            db: Db { row: None },
            procs: (0..self.procs)
                .map(|p| Proc {
                    owner: p as Owner,
                    skew: 0,
                    next: 0,
                    waiting: None,
                    run: None,
                    fenced: None,
                })
                .collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            claim_ids: 0,
            restarts: 0,
            clock_steps: 0,
            resends: 0,
            ran: Vec::new(),
            ran_twice: false,
            ran_early: false,
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
        state.claim_ids <= self.max_claim_ids
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::properties()
    }
}
