//! The membership protocol (`sql/membership/{heartbeat,claim,shed,release,sweep,fence}.sql` and
//! the local steps around them: `src/membership/leaser.rs`, `tick.rs`, `fair.rs`, `warm_up.rs`,
//! `local.rs`, `deliver.rs`).
//!
//! Two processes (and a spare id for a process replaced by one under a new id), two units of
//! weights 1 and 2, discrete time as in the other models: `State::now` is the database clock in
//! ticks, and every local `Instant` advances with it. A statement's transaction starts when it is
//! sent (its `now()` is the tick it was sent at) and it executes atomically against the newest rows
//! at any later step, or never. A process records its local instant before sending a heartbeat;
//! its answer makes the local deadline that instant plus the TTL. A process believes a unit (its
//! local view, which `Leaser::token` and the fence read) only while that deadline has not passed.
//!
//! Each process's membership loop waits on one statement at a time (heartbeat, claim, shed,
//! release, sweep); its liveness watcher forgets every unit once the local deadline passes. A tick
//! decides from the database as stats.sql reads it at the step it decides (the read itself is not a
//! step of its own; the claim or shed it sends executes later, against whatever changed since):
//! the fair share by weight (`fair.rs`: counted processes are those settled or owning units), the
//! warm-up (a process claims only once it counts, and in a cold fleet only once every other live
//! process has settled, until its first claim: the warm-up is then over for good, as `WarmUp` is,
//! until a restart; the warm-up's wall-clock wait and its longest bound are not modelled) and
//! the weight budget of its claim, or the lightest unit to shed. Every decision is queued in
//! decision order in the process's outbox and delivered to its reconciler later, one message a
//! step ([`Action::Flush`]); the loop sends its next statement only once what was queued when it
//! last delivered (after a heartbeat, a claim, a give-back decided) was delivered
//! (`Leaser::deliver` returns once the queue is empty; what the liveness watcher queues afterwards
//! it delivers on its own thread), so a unit chosen to shed is given back only once its loss was
//! delivered, and the release only once every loss was. A claim's answer is
//! adopted only while live and if nothing forgot the ownership since it was sent. A reconciler may
//! fence a unit it works on ([`Action::Fence`], up to `max_fences` per run): admitted, its
//! transaction holds the unit's row `FOR SHARE` until it commits ([`Action::Commit`]) or its
//! process is killed, and claims, sheds and sweeps skip the unit while releases wait for it.
//!
//! Not modelled: registration and removal of units and weight changes, the re-read of owned units
//! (`owned.sql`: a process back from a lapse or restarted never learns the units its row still
//! owns, which only costs liveness), the reported count and weight (a process row reports what the
//! units table says it owns, which every claim, shed and release keeps true), the local deadline's
//! margin (four fifths of the TTL in the library, the whole TTL here: the reconcilers' property
//! leaves out a process past its deadline, or with the unit's expiry queued, which that margin is
//! for), a failover.
//!
//! The step functions on [`Db`] are one statement each, the very code the differential test
//! (`tests/differential_membership.rs`) compares with the statements run against PostgreSQL.

mod actions;
mod db;
mod decide;
mod properties;
mod state;
mod step;

use stateright::{Model, Property};

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A unit's fencing token (`0`: none yet).
pub type Token = u8;
/// A process id (its index; a restart keeps it).
pub type Pid = u8;
/// How many units there are.
pub const UNITS: usize = 2;
/// Each unit's weight.
pub const WEIGHTS: [u8; UNITS] = [1, 2];

pub use self::db::{Db, Hole, Row, Unit};
pub use self::state::{Action, Answer, Change, Delivery, Msg, Op, Process, Reach, State, Wait};

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Membership {
    /// Processes running from the start.
    pub processes: usize,
    /// Spare process ids, each started when a process is replaced by one under a new id.
    pub spares: usize,
    pub ttl: Tick,
    /// sweep.sql's cutoff: how long a row must have been expired before a sweep deletes it.
    pub cutoff: Tick,
    /// heartbeat.sql's least age at which a later beat settles a row (the warm-up wait).
    pub settle_after: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    pub max_inflight: usize,
    /// The most tokens the sequence hands out (every claimed unit draws one).
    pub max_tokens: Token,
    /// How many interventions a run may have: a kill and restart (same id), a sweep, a release.
    pub max_interventions: u8,
    /// How many fenced transactions a run may begin (one at a time).
    pub max_fences: u8,
    /// The outage rule (`src/outage.rs`, `Leaser::defers`), as the library has it, on the last
    /// process: its membership loop cut off from the database (a statement given up:
    /// [`Action::GiveUp`], the model's connection failure or timeout), or its heartbeat finding
    /// its row lapsed, claims, sheds and sweeps nothing until one heartbeat interval
    /// (`Some(ticks)`) after its next answer; it heartbeats as ever. The other processes may
    /// claim, shed and sweep where the library would defer, which includes the library's steps.
    /// `None`: the rule off.
    pub outage: Option<Tick>,
    pub hole: Option<Hole>,
}

impl Membership {
    /// The bounds CI checks exhaustively.
    pub fn ci() -> Membership {
        Membership {
            processes: 2,
            spares: 1,
            ttl: 2,
            cutoff: -1,
            settle_after: 0,
            max_now: 2,
            max_inflight: 1,
            max_tokens: 3,
            max_interventions: 1,
            max_fences: 0,
            outage: Some(1),
            hole: None,
        }
    }

    /// Deeper bounds: `max_now` ticks (for a release).
    pub fn deep(max_now: Tick) -> Membership {
        Membership {
            max_now,
            max_tokens: (max_now + 1) as Token,
            ..Membership::ci()
        }
    }
}

impl Membership {
    /// Whether process `p` follows the outage rule (see [`Membership::outage`]).
    fn cut_off(&self, p: Pid) -> bool {
        self.outage.is_some() && p as usize + 1 == self.processes
    }
}

impl Model for Membership {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            db: Db::new(self.processes + self.spares),
            processes: (0..self.processes + self.spares)
                .map(|p| Process {
                    down: p >= self.processes,
                    ..Process::default()
                })
                .collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            interventions: 0,
            highest: [0; UNITS],
            token_went_back: false,
            gain_before_loss: false,
            given_back_while_worked: false,
            fenced: None,
            fences: 0,
            fenced_write_stale: false,
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
