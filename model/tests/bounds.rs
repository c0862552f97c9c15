//! Whether a model's bounds let its checker see a class of hole at all: a statement changed in the
//! test (a mutant of the model's step, made here rather than in the model) must be found at the
//! bounds given. A bound that is too tight (one statement in flight fleet-wide: no statement with an
//! earlier `now()` can commit after a later one) hides every hole of that class.

use std::fmt::Debug;
use std::hash::Hash;

use pgtenure_model::counterexample;
use stateright::{Model, Property};

/// `inner` with `mutate` applied after each of its steps, and `inner`'s own properties.
struct Mutant<M: Model> {
    inner: M,
    properties: Vec<Property<M>>,
    mutate: fn(&M, &M::State, &M::Action, &mut M::State),
}

impl<M: Model> Mutant<M> {
    fn new(inner: M, mutate: fn(&M, &M::State, &M::Action, &mut M::State)) -> Mutant<M> {
        let properties = inner.properties();
        Mutant {
            inner,
            properties,
            mutate,
        }
    }
}

/// A property's condition on the mutant.
type Condition<M> = fn(&Mutant<M>, &<M as Model>::State) -> bool;

/// Property `I` of the inner model.
fn slot<const I: usize, M: Model>(mutant: &Mutant<M>, state: &M::State) -> bool {
    (mutant.properties[I].condition)(&mutant.inner, state)
}

impl<M> Model for Mutant<M>
where
    M: Model,
    M::State: Clone + Debug + Hash + PartialEq,
    M::Action: Clone,
{
    type State = M::State;
    type Action = M::Action;

    fn init_states(&self) -> Vec<M::State> {
        self.inner.init_states()
    }

    fn actions(&self, state: &M::State, actions: &mut Vec<M::Action>) {
        self.inner.actions(state, actions);
    }

    fn next_state(&self, last: &M::State, action: M::Action) -> Option<M::State> {
        let mut next = self.inner.next_state(last, action.clone())?;
        (self.mutate)(&self.inner, last, &action, &mut next);
        Some(next)
    }

    fn within_boundary(&self, state: &M::State) -> bool {
        self.inner.within_boundary(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let slots: [Condition<M>; 8] = [
            slot::<0, M>,
            slot::<1, M>,
            slot::<2, M>,
            slot::<3, M>,
            slot::<4, M>,
            slot::<5, M>,
            slot::<6, M>,
            slot::<7, M>,
        ];
        assert!(
            self.properties.len() <= slots.len(),
            "more properties than slots"
        );
        self.properties
            .iter()
            .zip(slots)
            .map(|(property, slot)| Property {
                expectation: property.expectation.clone(),
                name: property.name,
                condition: slot,
            })
            .collect()
    }
}

mod membership {
    use pgtenure_model::membership::{Action, Answer, Membership, Op, State};

    /// Leaser::heartbeat without its `late` rule: a heartbeat answered after the previous local
    /// deadline, not lapsed by its own `now()`, keeps the units (the library forgets them: another
    /// process may have claimed them meanwhile).
    pub fn no_late_rule(_: &Membership, last: &State, action: &Action, next: &mut State) {
        let Action::Deliver(i) = action else { return };
        if let Answer::Heartbeat {
            process,
            lapsed: false,
        } = &last.answers[*i]
        {
            let p = *process as usize;
            next.processes[p].owned = last.processes[p].owned;
        }
    }

    /// heartbeat.sql as `expires_at = now() + ttl` (without `greatest`): a heartbeat whose
    /// transaction began earlier, committing after a later one, shortens the process's expiry.
    pub fn heartbeat_may_shorten(
        model: &Membership,
        last: &State,
        action: &Action,
        next: &mut State,
    ) {
        let Action::Exec(i) = action else { return };
        let msg = &last.inflight[*i];
        if matches!(msg.op, Op::Heartbeat) {
            if let Some(row) = next.db.processes[msg.process as usize].as_mut() {
                row.expires_at = msg.now + model.ttl;
            }
        }
    }
}

/// With one statement in flight fleet-wide (`Membership::ci`), every statement executes before
/// the next is sent, so none with an earlier `now()` commits after a later one: a heartbeat that
/// may shorten the expiry goes unnoticed there. Two in flight find it.
#[test]
fn a_heartbeat_that_may_shorten_the_expiry_needs_two_statements_in_flight() {
    use pgtenure_model::membership::Membership;
    let model = Membership {
        max_inflight: 2,
        max_interventions: 0,
        ..Membership::ci()
    };
    counterexample(
        Mutant::new(model, membership::heartbeat_may_shorten),
        "membership (2 in flight) with a heartbeat that may shorten",
        "no belief past the local deadline or the database's expiry",
    );
}

mod elector {
    use pgtenure_model::elector::{Action, Election, Op, State};

    /// is_leader.sql renewing with `expires_at = now() + ttl` (without `greatest`): a renewal
    /// whose transaction began earlier, committing after a later one, shortens the tenure.
    pub fn renewal_may_shorten(model: &Election, last: &State, action: &Action, next: &mut State) {
        let Action::Exec(i) = action else { return };
        let msg = &last.inflight[*i];
        let Op::Poll { guard: Some(term) } = msg.op else {
            return;
        };
        let (Some(was), Some(row)) = (&last.db.row, next.db.row.as_mut()) else {
            return;
        };
        let renewed = was.holder == msg.holder
            && was.term == term
            && was.expires_at > msg.now
            && !was.resign_requested;
        if renewed {
            row.expires_at = msg.now + model.ttl;
        }
    }
}

/// The elector's CI bounds (2 statements in flight) find a renewal that may shorten the tenure.
#[test]
fn a_renewal_that_may_shorten_the_tenure_is_found_at_the_electors_bounds() {
    use pgtenure_model::elector::Election;
    counterexample(
        Mutant::new(Election::ci(), elector::renewal_may_shorten),
        "elector with a renewal that may shorten",
        "no belief past the local deadline or the database's expiry",
    );
}

/// The heartbeat's `late` rule (forget the units when the answer comes after the previous local
/// deadline) guards a takeover: another process claims the units while the heartbeat's answer is
/// on its way. A takeover of two units draws the 3rd and 4th tokens: at `Membership::ci`'s 3 the
/// rule can be removed unnoticed (458,197 states, no counterexample); with 4 it is found.
#[test]
fn a_heartbeat_without_its_late_rule_needs_four_tokens() {
    use pgtenure_model::membership::Membership;
    let model = Membership {
        max_tokens: 4,
        max_interventions: 0,
        ..Membership::ci()
    };
    counterexample(
        Mutant::new(model, membership::no_late_rule),
        "membership (4 tokens) without the late rule",
        "no two believers of a unit",
    );
}
