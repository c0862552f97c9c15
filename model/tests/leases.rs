//! The leases model, checked exhaustively (breadth-first) within bounds: every property holds in
//! every reachable state; each reintroduced hole is found, with its counterexample printed.
//! `PGTENURE_MODEL_DEPTH=<ticks>` checks deeper bounds (longer TTL, more restarts and owner names).

use pgtenure_model::leases::{Hole, Leases};
use stateright::{Checker, Model};
use std::time::Instant;

fn check(model: Leases, what: &str) -> impl Checker<Leases> {
    let started = Instant::now();
    let checker = model.checker().threads(1).spawn_bfs().join();
    println!(
        "{what}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

#[test]
fn every_property_holds_in_every_reachable_state() {
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Leases::deep(depth.parse().expect("PGTENURE_MODEL_DEPTH: a number of ticks")),
        Err(_) => Leases::ci(),
    };
    let checker = check(model, "leases");
    checker.assert_properties();
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(hole: Hole, property: &'static str) -> String {
    let model = Leases {
        hole: Some(hole),
        ..Leases::ci()
    };
    let checker = check(model, &format!("leases with {hole:?}"));
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{hole:?}: no counterexample to {property:?}"));
    let trace = format!("{path}");
    println!("{hole:?} breaks {property:?}:\n{trace}");
    trace
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
