//! What the checker checks in every state.

use stateright::Property;

use super::{Membership, State, UNITS};

/// The properties: no two processes believe a unit at once (by their local views, nor by what
/// their reconcilers work), a believer's fence admits it (and only it), a unit's token never
/// repeats or goes back, a loss is delivered before any later gain, a unit is given back only once
/// its reconciler was told it lost, a fenced write commits only while its unit stays its process's
/// with its token, and no belief past the local deadline, which never falls after the database's
/// expiry.
pub(super) fn properties() -> Vec<Property<Membership>> {
    vec![
        Property::always("no two believers of a unit", |_, state| {
            no_two_believers(state)
        }),
        Property::always("no two reconcilers work a unit", |_, state| {
            no_two_workers(state)
        }),
        Property::always(
            "a unit is given back only once its reconciler was told it lost",
            |_, state: &State| !state.given_back_while_worked,
        ),
        Property::always(
            "a unit's fence admits only its current owner and token",
            |_, state| fence_admits_believers(state),
        ),
        Property::always(
            "a fenced write commits only while its process owns the unit with its token",
            |_, state: &State| !state.fenced_write_stale,
        ),
        Property::always(
            "a unit's token never repeats or goes back",
            |_, state: &State| !state.token_went_back,
        ),
        Property::always(
            "a unit lost is delivered lost before any later gain",
            |_, state: &State| !state.gain_before_loss,
        ),
        Property::always(
            "no belief past the local deadline or the database's expiry",
            |_, state| deadline_within_expiry(state),
        ),
    ]
}

/// Checked on the local view and the reconciler together (`Process::believes`).
fn no_two_believers(state: &State) -> bool {
    (0..UNITS).all(|u| {
        state
            .processes
            .iter()
            .filter(|process| process.believes(u, state.now).is_some())
            .count()
            <= 1
    })
}

/// Checked on what the reconcilers were told (`Process::works`): a reconciler past its local
/// deadline, or with the unit's loss queued, is not counted (the library's margin between the local
/// deadline and the row's expiry is for that delivery; see the module docs).
fn no_two_workers(state: &State) -> bool {
    (0..UNITS).all(|u| {
        state
            .processes
            .iter()
            .filter(|process| process.works(u, state.now).is_some())
            .count()
            <= 1
    })
}

/// Every unit a process works on (told gained, live by the local deadline) passes its fence
/// with the token it was told, so no other process and no other token does.
fn fence_admits_believers(state: &State) -> bool {
    state.processes.iter().enumerate().all(|(p, process)| {
        (0..UNITS).all(|u| match process.believes(u, state.now) {
            Some(token) => state.db.fence(state.now, p as u8, u, token),
            None => true,
        })
    })
}

/// A process live by its local deadline has a row that lives at least as long.
fn deadline_within_expiry(state: &State) -> bool {
    state.processes.iter().enumerate().all(|(p, process)| {
        !process.live(state.now)
            || state.db.processes[p]
                .zip(process.deadline)
                .is_some_and(|(row, deadline)| deadline <= row.expires_at)
    })
}
