//! What the checker checks in every state.

use stateright::Property;

use super::{Leases, State, Tenure};

/// The properties: no two processes believe at once, a fence admits only the current tenure, a
/// token never repeats or goes back, and a local deadline never falls after the database's expiry.
pub(super) fn properties() -> Vec<Property<Leases>> {
    vec![
        Property::always("no two believers", |_, state| no_two_believers(state)),
        Property::always("a fence admits only the current tenure", |_, state| {
            fence_current(state)
        }),
        Property::always("a token never repeats or goes back", |_, state: &State| {
            !state.token_went_back
        }),
        Property::always(
            "the local deadline never falls after the database's expiry",
            |_, state| deadline_within_expiry(state),
        ),
    ]
}

fn exempt(state: &State, p: usize, tenure: &Tenure) -> bool {
    // An operator's force-release ends a tenure whose holder still believes (the fence protects);
    // raw grants under one owner name are one holder by design (an idempotent re-acquire).
    state.forced.binary_search(&tenure.token).is_ok()
        || (tenure.raw
            && state.procs.iter().enumerate().any(|(q, other)| {
                q != p
                    && other.owner == state.procs[p].owner
                    && other.tenure.as_ref().is_some_and(|t| t.raw)
            }))
}

fn no_two_believers(state: &State) -> bool {
    let believers: Vec<(usize, &Tenure)> = state
        .procs
        .iter()
        .enumerate()
        .filter_map(|(p, proc)| proc.believes(state.now).map(|tenure| (p, tenure)))
        .filter(|(_, tenure)| state.forced.binary_search(&tenure.token).is_err())
        .collect();
    believers.iter().enumerate().all(|(i, (_, a))| {
        believers[i + 1..].iter().all(|(_, b)| {
            // The same tenure twice is allowed only for raw grants (one owner name, one holder).
            a.token == b.token && a.raw && b.raw
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

fn deadline_within_expiry(state: &State) -> bool {
    state.procs.iter().enumerate().all(|(p, proc)| {
        let Some(tenure) = proc.believes(state.now) else {
            return true;
        };
        // A belief from before a failover may outlast what the standby received: the hold-off
        // keeps everyone else from being granted the key meanwhile ("no two believers").
        if exempt(state, p, tenure) || tenure.timeline < state.db.timeline {
            return true;
        }
        match &state.db.row {
            Some(row) if row.token == tenure.token => tenure.deadline <= row.held_until,
            // Its tenure ended in the database while it believes.
            _ => false,
        }
    })
}
