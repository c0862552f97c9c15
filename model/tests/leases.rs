//! The leases model, checked exhaustively (breadth-first) within bounds: every property holds in
//! every reachable state; each reintroduced hole is found, with its counterexample printed.
//! `PGTENURE_MODEL_DEPTH=<ticks>` checks deeper bounds (longer TTL, more restarts and owner names).

use pgtenure_model::leases::{Hole, Leases};
use pgtenure_model::{check, counterexample};
use stateright::{Checker, Model};

#[test]
fn every_property_holds_in_every_reachable_state() {
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Leases::deep(
            depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
        ),
        Err(_) => Leases::ci(),
    };
    let checker = check(model, "leases", None);
    checker.assert_properties();
}

/// A failover to a standby that lost the last commits (at its own bounds): every property holds.
#[test]
fn every_property_holds_across_a_failover() {
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Leases {
            max_now: depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
            max_inflight: 2,
            ..Leases::failover()
        },
        Err(_) => Leases::failover(),
    };
    let checker = check(model, "leases, failover", None);
    checker.assert_properties();
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(hole: Hole, property: &'static str) -> String {
    let bounds = match hole {
        Hole::NoTimelineFold | Hole::NoHoldOff => Leases::failover(),
        _ => Leases::ci(),
    };
    let model = Leases {
        hole: Some(hole),
        ..bounds
    };
    counterexample(model, &format!("leases with {hole:?}"), property)
}

#[test]
fn tokens_not_folded_with_the_timeline_are_found() {
    found(Hole::NoTimelineFold, "a token never repeats or goes back");
}

#[test]
fn grants_not_held_off_after_a_promotion_are_found() {
    found(Hole::NoHoldOff, "no two believers");
}

#[test]
fn a_renewal_that_may_shorten_an_expiry_is_found() {
    found(
        Hole::RenewalMayShorten,
        "the local deadline never falls after the database's expiry",
    );
}

#[test]
fn a_local_deadline_recorded_after_sending_is_found() {
    found(
        Hole::DeadlineAfterAnswer,
        "the local deadline never falls after the database's expiry",
    );
}

#[test]
fn a_fence_without_its_share_lock_is_found() {
    found(
        Hole::FenceWithoutShareLock,
        "a fence admits only the current tenure",
    );
}

#[test]
fn a_raw_grant_adopting_a_managed_tenure_is_found() {
    found(Hole::RawAdoptsManaged, "no two believers");
}

/// The shortest way the shortening renewal breaks the deadline property, replayed step by step
/// (the trace in docs/reliability.md): with the hole the last state breaks the property, without it
/// the same steps keep it.
#[test]
fn the_documented_trace_of_a_shortening_renewal() {
    use pgtenure_model::leases::{Action, Op};
    let steps = [
        Action::Send(0, Op::Acquire { raw: false }),
        Action::Exec(0),
        Action::Deliver(0),
        Action::Send(0, Op::RenewTenure { token: 1 }),
        Action::Tick,
        Action::GiveUp(0),
        Action::Send(0, Op::RenewTenure { token: 1 }),
        Action::Exec(1),
        Action::Deliver(0),
        Action::Exec(0),
    ];
    for hole in [Some(Hole::RenewalMayShorten), None] {
        let model = Leases {
            hole,
            ..Leases::ci()
        };
        let property = model
            .properties()
            .into_iter()
            .find(|p| p.name == "the local deadline never falls after the database's expiry")
            .unwrap();
        let mut state = model.init_states().remove(0);
        for step in steps.clone() {
            let mut enabled = Vec::new();
            model.actions(&state, &mut enabled);
            assert!(enabled.contains(&step), "{step:?} not enabled in {state:?}");
            state = model.next_state(&state, step).unwrap();
        }
        println!("{hole:?}: {state:?}");
        assert_eq!(
            (property.condition)(&model, &state),
            hole.is_none(),
            "{state:?}"
        );
    }
}

/// The model's one assumption, lifted: a raw user that re-acquires while its release's outcome is
/// unknown can have its new grant (the same token: the idempotent raw re-acquire keeps it) ended by
/// the late release, while another process is granted the key.
#[test]
fn a_raw_release_of_unknown_outcome_can_end_the_re_acquired_grant() {
    let model = Leases {
        raw_gives_up_on_release: true,
        ..Leases::ci()
    };
    let checker = check(
        model,
        "leases, raw users not waiting for a release",
        Some("no two believers"),
    );
    let path = checker
        .discovery("no two believers")
        .expect("a counterexample");
    println!("{path}");
}
