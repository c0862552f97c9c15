//! What the checker checks in every state.

use stateright::Property;

use super::{Semaphores, State, Tenure};

/// The properties: the cap in the database and among the holders, one believer per slot, a fence
/// admits only the slot's current tenure, a token never repeats or goes back, and a local deadline
/// never falls after the database's expiry.
pub(super) fn properties() -> Vec<Property<Semaphores>> {
    vec![
        Property::always(
            "never more than N live permits in the database",
            |model: &Semaphores, state: &State| state.db.live(state.now) <= model.permits as usize,
        ),
        Property::always(
            "never more than N believers",
            |model: &Semaphores, state: &State| believers(state).len() <= model.permits as usize,
        ),
        Property::always("no two believers of one slot", |_, state| {
            let believers = believers(state);
            believers
                .iter()
                .enumerate()
                .all(|(i, a)| believers[i + 1..].iter().all(|b| a.slot != b.slot))
        }),
        Property::always(
            "a fence admits only the slot's current tenure",
            |_, state| fence_current(state),
        ),
        Property::always("a token never repeats or goes back", |_, state: &State| {
            !state.token_went_back
        }),
        Property::always(
            "the local deadline never falls after the database's expiry",
            |_, state| deadline_within_expiry(state),
        ),
    ]
}

fn believers(state: &State) -> Vec<&Tenure> {
    state
        .procs
        .iter()
        .filter_map(|proc| proc.believes(state.now))
        .collect()
}

fn fence_current(state: &State) -> bool {
    state.procs.iter().all(|proc| match proc.fenced {
        None => true,
        Some((slot, token)) => state.db.rows[slot as usize]
            .as_ref()
            .is_some_and(|row| row.token == token && row.owner == proc.owner),
    })
}

fn deadline_within_expiry(state: &State) -> bool {
    state.procs.iter().all(|proc| {
        let Some(tenure) = proc.believes(state.now) else {
            return true;
        };
        match &state.db.rows[tenure.slot as usize] {
            Some(row) if row.token == tenure.token => tenure.deadline <= row.held_until,
            // Its tenure ended in the database while it believes.
            _ => false,
        }
    })
}
