//! The elector model, checked exhaustively (breadth-first) within bounds: every property holds in
//! every reachable state; each reintroduced hole is found, with its counterexample printed.
//! `PGTENURE_MODEL_DEPTH=<ticks>` checks deeper bounds (as many ticks and terms), with
//! `PGTENURE_MODEL_INTERVENTIONS=<n>` interventions per run (default 1).

use pgtenure_model::elector::{Action, Election, Hole, Op};
use pgtenure_model::{check, counterexample};
use stateright::{Checker, Model};

#[test]
fn every_property_holds_in_every_reachable_state() {
    let interventions = std::env::var("PGTENURE_MODEL_INTERVENTIONS").map_or(1, |n| {
        n.parse()
            .expect("PGTENURE_MODEL_INTERVENTIONS: a number of interventions")
    });
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Election::deep(
            depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
            interventions,
        ),
        Err(_) => Election {
            max_interventions: interventions,
            ..Election::ci()
        },
    };
    let checker = check(model, "elector", None);
    checker.assert_properties();
}

/// A failover to a standby that lost the last commits (at its own bounds): every property holds.
/// `PGTENURE_MODEL_DEPTH=<ticks>` checks it deeper, with 2 statements in flight.
#[test]
fn every_property_holds_across_a_failover() {
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Election {
            max_now: depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
            max_inflight: 2,
            ..Election::failover()
        },
        Err(_) => Election::failover(),
    };
    let checker = check(model, "elector, failover", None);
    checker.assert_properties();
}

/// A clone of the first member's elector calls `is_leader` beside its campaign. With the hole the
/// clone check found reintroduced (an `ended` answer does not give up the tenure's other polls in
/// flight), a clone's renewal answered after the campaign's poll was told to step down (and the
/// term was resigned) is led on: two believers (the trace in docs/reliability.md).
#[test]
fn a_clone_renewal_led_on_after_a_requested_resignation_is_found() {
    counterexample(
        Election {
            ended_stands_down: false,
            ..Election::clones()
        },
        "elector, a clone polling",
        "no two believers",
    );
}

/// As the library does since (a poll answered `ended` makes the tenure's other polls in flight
/// not led on, as a resignation does), every property holds with the clone polling.
#[test]
fn every_property_holds_with_a_clone_polling_when_ended_stands_down() {
    let max_now = std::env::var("PGTENURE_MODEL_DEPTH").map_or(0, |depth| {
        depth
            .parse()
            .expect("PGTENURE_MODEL_DEPTH: a number of ticks")
    });
    let model = Election {
        ended_stands_down: true,
        max_now,
        ..Election::clones()
    };
    let checker = check(model, "elector, a clone polling, ended stands down", None);
    checker.assert_properties();
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(hole: Hole, property: &'static str) -> String {
    let bounds = match hole {
        Hole::NoTimelineFold | Hole::NoHoldOff => Election::failover(),
        _ => Election::ci(),
    };
    let model = Election {
        hole: Some(hole),
        ..bounds
    };
    counterexample(model, &format!("elector with {hole:?}"), property)
}

#[test]
fn terms_not_folded_with_the_timeline_are_found() {
    found(Hole::NoTimelineFold, "a term never repeats or goes back");
}

#[test]
fn elections_not_held_off_after_a_promotion_are_found() {
    found(Hole::NoHoldOff, "no two believers");
}

#[test]
fn a_renewal_that_ends_a_requested_tenure_is_found() {
    found(Hole::RenewalEndsOnRequest, "no two believers");
}

#[test]
fn a_resignation_forgotten_before_it_is_acknowledged_is_found() {
    found(
        Hole::ResignForgetsFirst,
        "a tenure stood down from is kept to resign while it is live",
    );
}

/// Replays `steps` with and without `hole`: with it the last state breaks `property`, without it
/// the same steps keep it.
fn replay(hole: Hole, property: &str, steps: &[Action]) {
    for hole in [Some(hole), None] {
        let model = Election {
            hole,
            ..Election::ci()
        };
        let property = model
            .properties()
            .into_iter()
            .find(|p| p.name == property)
            .unwrap();
        let mut state = model.init_states().remove(0);
        for step in steps {
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            assert!(enabled.contains(step), "{step:?} not enabled in {state:?}");
            state = model.next_state(&state, step.clone()).unwrap();
        }
        println!("{hole:?}: {state:?}");
        assert_eq!(
            (property.condition)(&model, &state),
            hole.is_none(),
            "{state:?}"
        );
    }
}

/// The shortest way a renewal that ends a requested tenure makes two believers (the trace in
/// docs/reliability.md).
#[test]
fn the_documented_trace_of_a_renewal_ending_a_requested_tenure() {
    replay(
        Hole::RenewalEndsOnRequest,
        "no two believers",
        &[
            Action::Send(0, Op::Poll { guard: None }),
            Action::Exec(0),
            Action::Deliver(0),
            Action::RequestResign,
            Action::Exec(0),
            Action::Send(0, Op::Poll { guard: Some(1) }),
            Action::Exec(0),
            Action::Send(1, Op::Poll { guard: None }),
            Action::Exec(0),
            Action::Deliver(1),
        ],
    );
}

/// The shortest way a resignation forgotten when it is sent leaves a live tenure nobody will
/// resign (the trace in docs/reliability.md).
#[test]
fn the_documented_trace_of_a_resignation_forgotten_when_sent() {
    replay(
        Hole::ResignForgetsFirst,
        "a tenure stood down from is kept to resign while it is live",
        &[
            Action::Send(0, Op::Poll { guard: None }),
            Action::Exec(0),
            Action::Deliver(0),
            Action::Resign(0),
            Action::Send(0, Op::Resign { term: 1 }),
            Action::GiveUp(0),
        ],
    );
}

/// The clone's trace in docs/reliability.md, replayed with the hole (two believers at the end) and
/// with the fix (`ended_stands_down`: the same steps keep one believer).
#[test]
fn the_documented_trace_of_a_clone_renewal_led_on_after_a_requested_resignation() {
    let steps = [
        Action::Send(0, Op::Poll { guard: None }),
        Action::Send(1, Op::Poll { guard: None }),
        Action::Exec(0),
        Action::Deliver(0),
        Action::CloneSend(0, Op::Poll { guard: Some(1) }),
        Action::Exec(1),
        Action::RequestResign,
        Action::Exec(1),
        Action::Send(0, Op::Poll { guard: Some(1) }),
        Action::Exec(1),
        Action::Deliver(1),
        Action::Deliver(0),
        Action::CloneSend(0, Op::Resign { term: 1 }),
        Action::Exec(1),
        Action::Exec(0),
        Action::Deliver(1),
    ];
    for fixed in [false, true] {
        let model = Election {
            ended_stands_down: fixed,
            ..Election::clones()
        };
        let property = model
            .properties()
            .into_iter()
            .find(|p| p.name == "no two believers")
            .unwrap();
        let mut state = model.init_states().remove(0);
        for step in &steps {
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            assert!(enabled.contains(step), "{step:?} not enabled in {state:?}");
            state = model.next_state(&state, step.clone()).unwrap();
        }
        println!("ended_stands_down {fixed}: {state:?}");
        assert_eq!((property.condition)(&model, &state), fixed, "{state:?}");
    }
}

/// A fenced transaction (`Leadership::fence`, then its write) per run, no intervention: every
/// property holds, the fenced write's term current until it commits among them.
#[test]
fn a_fenced_write_commits_only_while_its_term_is_current() {
    let checker = check(
        Election::fenced(),
        "elector with a fenced transaction",
        None,
    );
    checker.assert_properties();
}

/// fence.sql without its FOR SHARE lock: a new election after the tenure expired does not wait
/// for the fenced transaction, whose write then commits under a term no longer current.
#[test]
fn a_fence_that_does_not_lock_the_row_is_found() {
    let model = Election {
        hole: Some(Hole::FenceWithoutLock),
        ..Election::fenced()
    };
    counterexample(
        model,
        "elector with FenceWithoutLock",
        "a fenced write commits only while its term is current",
    );
}
