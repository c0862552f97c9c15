//! What the checker checks in every state.

use stateright::Property;

use super::{State, Ticks};

/// The properties: a tick runs at most once and never before it is due, a run's local deadline
/// never falls after the database's busy period, a fence admits only the current claim, tokens
/// never repeat or go back.
pub(super) fn properties() -> Vec<Property<Ticks>> {
    vec![
        Property::always("a tick runs at most once", |_, state: &State| {
            !state.ran_twice
        }),
        Property::always("a tick never runs before it is due", |_, state: &State| {
            !state.ran_early
        }),
        Property::always(
            "a run's local deadline never falls after the database's busy-until",
            |_, state| deadline_within_busy(state),
        ),
        Property::always("a fence admits only the current claim", |_, state| {
            fence_current(state)
        }),
        Property::always("a token never repeats or goes back", |_, state: &State| {
            !state.token_went_back
        }),
    ]
}

/// Every run in progress (before its local deadline: a run stops by then) holds the job's row
/// busy until at least its deadline.
fn deadline_within_busy(state: &State) -> bool {
    state.procs.iter().all(|proc| {
        let Some(run) = &proc.run else {
            return true;
        };
        state.db.row.as_ref().is_some_and(|row| {
            row.token == run.token
                && row.owner == proc.owner
                && row.busy_until.is_some_and(|b| run.deadline <= b)
        })
    })
}

fn fence_current(state: &State) -> bool {
    state.procs.iter().all(|proc| match proc.fenced {
        None => true,
        Some(token) => state
            .db
            .row
            .as_ref()
            .is_some_and(|row| row.token == token && row.owner == proc.owner),
    })
}
