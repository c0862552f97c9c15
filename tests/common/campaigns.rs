//! Who leads a set of campaigns, whom they elected, and who owns which unit: the outage tests'
//! view of a fleet.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use pgtenure::elector::{LeaderEvent, Leadership};
use pgtenure::membership::{Running, Unit, Units};

/// Each unit's owner (process id) and token.
pub type Owners = BTreeMap<Unit, (String, i64)>;

/// Who leads, and who owns each unit under which token, once one member of `campaigns` leads and
/// each of the `count` units is owned by a live process of `running`, an equal share each.
pub fn settled<L: Borrow<Leadership>>(
    units: &Units,
    campaigns: &[L],
    running: &[Running],
    count: usize,
) -> Option<(usize, Owners)> {
    let rows = units.assignments().ok()?;
    let owners: Owners = (rows.into_iter())
        .filter(|a| a.owner_live)
        .filter_map(|a| Some((a.unit, (a.owner?, a.token?))))
        .collect();
    let (leader, _) = leading(campaigns)?;
    let even = running.iter().all(|r| {
        let pid = r.leaser().process_id();
        owners.values().filter(|(o, _)| o == pid).count() == count / running.len()
    });
    (owners.len() == count && even).then_some((leader, owners))
}

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
