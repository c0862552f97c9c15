//! What the checker checks in every state.

use stateright::Property;

use super::{Election, Op, State};

/// The properties: no two members believe at once, a term never repeats or goes back, no belief
/// past the local deadline nor past the database's expiry of its term, a loss is told before any
/// later gain, a tenure stood down from is kept to resign until a resignation is acknowledged, and
/// a fenced write commits only while its term is current.
pub(super) fn properties() -> Vec<Property<Election>> {
    vec![
        Property::always("no two believers", |_, state| no_two_believers(state)),
        Property::always("a term never repeats or goes back", |_, state: &State| {
            !state.term_went_back && !state.elected_went_back
        }),
        Property::always(
            "no belief past the local deadline or the database's expiry",
            |_, state| deadline_within_expiry(state),
        ),
        Property::always(
            "a loss is told before any later gain",
            |_, state: &State| !state.gain_before_loss,
        ),
        Property::always(
            "a tenure stood down from is kept to resign while it is live",
            |_, state| kept_to_resign(state),
        ),
        Property::always(
            "a fenced write commits only while its term is current",
            |_, state| fence_current(state),
        ),
    ]
}

/// While a fenced transaction is open (its fence admitted), the row carries its holder and term.
fn fence_current(state: &State) -> bool {
    state.members.iter().all(|member| match member.fence {
        Some((term, true)) => state
            .db
            .row
            .as_ref()
            .is_some_and(|row| row.holder == member.holder && row.term == term),
        _ => true,
    })
}

/// Checked on `Elector::term` (term and local deadline), which every `is_leading` believer also
/// has: the stronger check.
fn no_two_believers(state: &State) -> bool {
    state
        .members
        .iter()
        .filter(|member| member.elector_term(state.now).is_some())
        .count()
        <= 1
}

fn deadline_within_expiry(state: &State) -> bool {
    state.members.iter().all(|member| {
        // `leading` implies `elector_term`, which implies `now < deadline`.
        let Some(term) = member.elector_term(state.now) else {
            return member.leading(state.now).is_none();
        };
        let deadline = member.deadline.unwrap_or(i8::MIN);
        // A belief from before a failover may outlast what the standby received: the hold-off
        // keeps everyone else from being elected meanwhile ("no two believers").
        if member.timeline < state.db.timeline {
            return true;
        }
        state.db.row.as_ref().is_some_and(|row| {
            row.holder == member.holder && row.term == term && deadline <= row.expires_at
        })
    })
}

fn kept_to_resign(state: &State) -> bool {
    let Some(row) = state
        .db
        .row
        .as_ref()
        .filter(|row| row.expires_at > state.now)
    else {
        return true;
    };
    state.members.iter().all(|member| {
        member.holder != row.holder
            || member.stood_down != Some(row.term)
            || member.resigning == Some(row.term)
            || member
                .waiting
                .as_ref()
                .is_some_and(|wait| wait.op == Op::Resign { term: row.term })
    })
}
