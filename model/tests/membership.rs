//! The membership model, checked exhaustively (breadth-first) within bounds: every property holds
//! in every reachable state; each reintroduced hole is found, with its counterexample printed.
//! `PGTENURE_MODEL_DEPTH=<ticks>` checks deeper bounds (as many ticks, one more token), with
//! `PGTENURE_MODEL_INTERVENTIONS=<n>` interventions per run (kill and restart under the same or a
//! new id, sweep, release; default 1 for the property check; the hole checks take none). A
//! second check lets each run begin one fenced transaction (no intervention), since the fence's
//! lock is what keeps a fenced write's unit from changing hands before it commits.

use pgtenure_model::membership::{Hole, Membership};
use pgtenure_model::{check, counterexample};
use stateright::Checker;

#[test]
fn every_property_holds_in_every_reachable_state() {
    let interventions = std::env::var("PGTENURE_MODEL_INTERVENTIONS").map_or(1, |n| {
        n.parse()
            .expect("PGTENURE_MODEL_INTERVENTIONS: a number of interventions")
    });
    let model = match std::env::var("PGTENURE_MODEL_DEPTH") {
        Ok(depth) => Membership::deep(
            depth
                .parse()
                .expect("PGTENURE_MODEL_DEPTH: a number of ticks"),
        ),
        Err(_) => Membership::ci(),
    };
    let model = Membership {
        max_interventions: interventions,
        ..model
    };
    let checker = check(model, "membership", None);
    checker.assert_properties();
}

/// Checks the model with `hole` reintroduced and returns the counterexample to `property`.
fn found(hole: Hole, property: &'static str) -> String {
    let model = Membership {
        hole: Some(hole),
        max_interventions: 0,
        ..Membership::ci()
    };
    counterexample(model, &format!("membership with {hole:?}"), property)
}

#[test]
fn a_shed_told_after_the_statement_is_found() {
    found(Hole::ShedToldAfter, "no two believers of a unit");
}

#[test]
fn a_local_deadline_recorded_at_the_answer_is_found() {
    found(
        Hole::DeadlineAtAnswer,
        "no belief past the local deadline or the database's expiry",
    );
}

#[test]
fn a_shed_sent_before_its_loss_was_delivered_is_found() {
    found(Hole::ShedBeforeTold, "no two reconcilers work a unit");
}

#[test]
fn a_shed_told_after_the_statement_breaks_the_order_of_deliveries() {
    found(
        Hole::ShedToldAfter,
        "a unit lost is delivered lost before any later gain",
    );
}

/// The model with one fenced transaction per run, and no intervention.
fn fenced() -> Membership {
    Membership {
        max_fences: 1,
        max_interventions: 0,
        ..Membership::ci()
    }
}

#[test]
fn a_fenced_write_commits_only_while_its_unit_stays() {
    let checker = check(fenced(), "membership with a fenced transaction", None);
    checker.assert_properties();
}

#[test]
fn a_fence_that_does_not_lock_the_unit_is_found() {
    let model = Membership {
        hole: Some(Hole::FenceWithoutLock),
        ..fenced()
    };
    counterexample(
        model,
        "membership with FenceWithoutLock",
        "a fenced write commits only while its process owns the unit with its token",
    );
}

/// CI's bounds with a fourth token and no intervention: with three tokens a run never reaches a
/// takeover of an expired process's units (the fourth claim), which this check does.
#[test]
fn every_property_holds_with_a_takeover_of_an_expired_process() {
    let model = Membership {
        max_tokens: 4,
        max_interventions: 0,
        ..Membership::ci()
    };
    let checker = check(model, "membership with 4 tokens, no intervention", None);
    checker.assert_properties();
}
