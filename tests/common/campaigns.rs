//! Who leads a set of campaigns, and whom they elected: the outage tests' view of a fleet.

use std::borrow::Borrow;

use pgtenure::elector::{LeaderEvent, Leadership};

/// The member that leads, and its term, once exactly one does.
pub fn leading<L: Borrow<Leadership>>(members: &[L]) -> Option<(usize, i64)> {
    let leaders: Vec<(usize, i64)> = (members.iter().enumerate())
        .filter_map(|(i, m)| m.borrow().term().map(|term| (i, term)))
        .collect();
    (leaders.len() == 1).then(|| leaders[0])
}

/// Every `Elected` each member's channel holds (draining it).
pub fn elections<L: Borrow<Leadership>>(members: &[L]) -> Vec<Vec<i64>> {
    (members.iter())
        .map(|m| {
            (m.borrow().events().try_iter())
                .filter_map(|event| match event {
                    LeaderEvent::Elected { term } => Some(term),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// Asserts that, of the elections each member's channel holds (drained), `leader`'s election of
/// `term` is the only one: nobody else was elected meanwhile.
pub fn assert_only_elected<L: Borrow<Leadership>>(
    members: &[L],
    leader: usize,
    term: i64,
    what: &str,
) {
    for (i, terms) in elections(members).iter().enumerate() {
        if i == leader {
            assert_eq!(terms, &[term], "{what}");
        } else {
            assert!(terms.is_empty(), "{what}: m{i} was elected {terms:?}");
        }
    }
}
