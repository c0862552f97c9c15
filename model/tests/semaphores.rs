//! The semaphores model, checked exhaustively (breadth-first) within bounds: every property holds
//! in every reachable state, the states the properties are about are reached (the cap, a takeover
//! of a lapsed slot, a contended insert), and each reintroduced hole is found, with its
//! counterexample printed.

use pgtenure_model::semaphores::{Action, Hole, Op, Semaphores, State};
use pgtenure_model::{check, counterexample};
use stateright::{Checker, Model, Property};

#[test]
fn every_property_holds_in_every_reachable_state() {
    check(Semaphores::ci(), "semaphores, 3 processes, 2 permits", None).assert_properties();
}

#[test]
fn every_property_holds_with_racing_statements() {
    check(
        Semaphores::pair(),
        "semaphores, 2 processes, 1 permit",
        None,
    )
    .assert_properties();
}

/// The model, whose states also carry which goals the path to them reached.
struct Reach(Semaphores);

/// A transition the checker must reach: (last, action, next).
type Goal = fn(&State, &Action, &State) -> bool;

const GOALS: [(&str, Goal); 3] = [
    (
        "the cap reached: N believers, and an acquire refused",
        |last, _, next| {
            // An answer with neither grant nor contention delivered while N believe.
            let believers = next.procs.iter().filter(|p| p.believes(next.now).is_some());
            believers.count() == 2
                && last.answers.len() > next.answers.len()
                && last.answers.iter().any(|a| {
                    a.granted.is_none() && !a.contended && next.answers.iter().all(|b| b != a)
                })
                && last.procs.iter().zip(&next.procs).any(|(l, n)| {
                    matches!(l.waiting, Some((Op::Acquire(_), _))) && n.waiting.is_none()
                })
        },
    ),
    ("a takeover of a lapsed slot", |last, action, next| {
        matches!(action, Action::Exec(_))
            && last.db.rows.iter().zip(&next.db.rows).any(|(l, n)| {
                matches!((l, n), (Some(l), Some(n)) if l.token != n.token && l.held_until <= last.now)
            })
    }),
    ("a contended insert answered", |_, action, next| {
        matches!(action, Action::Exec(_)) && next.answers.iter().any(|a| a.contended)
    }),
];

impl Model for Reach {
    type State = (State, u8);
    type Action = Action;

    fn init_states(&self) -> Vec<Self::State> {
        self.0.init_states().into_iter().map(|s| (s, 0)).collect()
    }

    fn actions(&self, state: &Self::State, actions: &mut Vec<Action>) {
        self.0.actions(&state.0, actions);
    }

    fn next_state(&self, last: &Self::State, action: Action) -> Option<Self::State> {
        let next = self.0.next_state(&last.0, action.clone())?;
        let mut seen = last.1;
        for (i, (_, goal)) in GOALS.iter().enumerate() {
            if goal(&last.0, &action, &next) {
                seen |= 1 << i;
            }
        }
        Some((next, seen))
    }

    fn within_boundary(&self, state: &Self::State) -> bool {
        self.0.within_boundary(&state.0)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::sometimes(GOALS[0].0, |_, s: &Self::State| s.1 & 1 != 0),
            Property::sometimes(GOALS[1].0, |_, s: &Self::State| s.1 & 2 != 0),
            Property::sometimes(GOALS[2].0, |_, s: &Self::State| s.1 & 4 != 0),
        ]
    }
}

/// Checks `model` with the goals and asserts those in `wanted` reached.
fn reached(model: Semaphores, wanted: &[usize]) {
    let checker = Reach(model).checker().threads(1).spawn_bfs().join();
    for &i in wanted {
        let name = GOALS[i].0;
        let path = checker
            .discovery(name)
            .unwrap_or_else(|| panic!("not reached: {name}"));
        println!("{name}: {} steps", path.into_actions().len());
    }
}

#[test]
fn within_ci_bounds_the_cap_and_a_takeover_are_reached() {
    reached(Semaphores::ci(), &[0, 1]);
}

#[test]
fn with_racing_statements_a_contended_insert_and_a_takeover_are_reached() {
    reached(Semaphores::pair(), &[1, 2]);
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(model: Semaphores, hole: Hole, property: &'static str) -> String {
    let model = Semaphores {
        hole: Some(hole),
        ..model
    };
    counterexample(model, &format!("semaphores with {hole:?}"), property)
}

#[test]
fn a_slot_bound_off_by_one_is_found() {
    found(
        Semaphores::ci(),
        Hole::SlotBoundOffByOne,
        "never more than N live permits in the database",
    );
    found(
        Semaphores::ci(),
        Hole::SlotBoundOffByOne,
        "never more than N believers",
    );
}

#[test]
fn an_acquire_without_skip_locked_is_found() {
    found(
        Semaphores::pair(),
        Hole::NoSkipLocked,
        "no two believers of one slot",
    );
}

/// The shortest way an acquire without `FOR UPDATE SKIP LOCKED` gives one slot to two holders,
/// replayed step by step (the trace in docs/reliability.md): a renewal sent before the slot lapsed
/// commits between the acquire's snapshot (the slot lapsed) and its update, which re-checks only key
/// and slot and overwrites the renewed tenure. Without the hole the acquire locks and re-checks the
/// row in one step: it takes the lapsed slot, and the renewal finds its tenure gone.
#[test]
fn the_documented_trace_of_an_acquire_without_skip_locked() {
    let mut steps = vec![
        Action::Send(0, Op::Acquire(None)),
        Action::Tick,
        Action::Exec(0),
        Action::Exec(0),
        Action::Deliver(0),
        Action::Send(0, Op::Renew { token: 1 }),
        Action::Tick,
        Action::Send(1, Op::Acquire(None)),
        Action::Exec(1),
        Action::Exec(0),
        Action::Exec(0),
        Action::Deliver(0),
        Action::Deliver(0),
    ];
    let model = Semaphores {
        hole: Some(Hole::NoSkipLocked),
        ..Semaphores::pair()
    };
    let state = replay(&model, &steps);
    assert!(!holds(&model, &state, "no two believers of one slot"));
    assert_eq!(
        [0, 1].map(|p| state.procs[p]
            .believes(state.now)
            .map(|t| (t.slot, t.token))),
        [Some((0, 1)), Some((0, 2))]
    );
    steps.remove(10);
    let model = Semaphores::pair();
    let state = replay(&model, &steps);
    assert!(holds(&model, &state, "no two believers of one slot"));
    assert_eq!(
        [0, 1].map(|p| state.procs[p].tenure.as_ref().map(|t| (t.slot, t.token))),
        [None, Some((0, 2))]
    );
}

fn replay(model: &Semaphores, steps: &[Action]) -> State {
    let mut state = model.init_states().remove(0);
    for step in steps {
        let mut enabled = Vec::new();
        model.actions(&state, &mut enabled);
        assert!(enabled.contains(step), "{step:?} not enabled in {state:?}");
        state = model.next_state(&state, step.clone()).unwrap();
    }
    println!("{:?}: {state:?}", model.hole);
    state
}

fn holds(model: &Semaphores, state: &State, name: &str) -> bool {
    let property = model
        .properties()
        .into_iter()
        .find(|p| p.name == name)
        .unwrap();
    (property.condition)(model, state)
}
