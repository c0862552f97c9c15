//! The tick-claims and scheduler model, checked exhaustively (breadth-first) within bounds: every
//! property holds in every reachable state; each reintroduced hole is found, with its
//! counterexample printed. `PGTENURE_MODEL_DEPTH=<ticks>` checks deeper bounds.

use pgtenure_model::ticks::{Hole, Ticks};
use pgtenure_model::{check, counterexample};
use stateright::Checker;

#[test]
fn every_property_holds_in_every_reachable_state() {
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Ticks::deep(
            depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
        ),
        Err(_) => Ticks::ci(),
    };
    let checker = check(model, "ticks", None);
    checker.assert_properties();
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(hole: Hole, property: &'static str) -> String {
    let model = Ticks {
        hole: Some(hole),
        ..Ticks::ci()
    };
    counterexample(model, &format!("ticks with {hole:?}"), property)
}

#[test]
fn a_claim_without_its_due_guard_is_found() {
    found(Hole::NoDueGuard, "a tick never runs before it is due");
}

#[test]
fn a_claim_without_its_busy_guard_is_found() {
    found(
        Hole::NoBusyGuard,
        "a run's local deadline never falls after the database's busy-until",
    );
}

#[test]
fn a_resent_claim_finding_its_win_by_owner_is_found() {
    found(Hole::AlreadyByOwner, "a tick runs at most once");
}

#[test]
fn an_extension_that_may_shorten_the_busy_period_is_found() {
    found(
        Hole::ExtendMayShorten,
        "a run's local deadline never falls after the database's busy-until",
    );
}
