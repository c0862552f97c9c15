//! A leaser's local state: what it owns, what it is shedding, its liveness deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sql::Reported;
use super::unit::{Unit, UnitLoss};
use crate::observe;

/// What this process holds of one unit: its weight, the fencing token of its claim, whether it
/// was unregistered ([`Units::remove`](super::Units::remove)) while this process owned it, and the
/// row's mark (its part of the digest the stats statement reads, see [`Local::digest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hold {
    pub(super) weight: i32,
    pub(super) token: i64,
    pub(super) removed: bool,
    pub(super) mark: i32,
}

/// A digest of the unit rows that name a process: how many, and the sum of their marks (a hash of
/// tenant, shard, token and weight, computed by the database). The stats statement reads it from
/// the table at every tick; a tick whose local view has another digest re-reads its units, so a
/// change made behind the leaser's back (an operator's `UPDATE` moving a unit, a token rewritten)
/// is adopted at the next tick, without a statement more in steady state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Digest {
    pub(super) units: i64,
    pub(super) marks: i64,
}

/// Units and what this process holds of each.
pub(super) type Holds = BTreeMap<Unit, Hold>;

#[derive(Default)]
pub(super) struct Local {
    /// Shared with a running tick, which copies it only if it changes something (copy on write).
    pub(super) owned: Arc<Holds>,
    /// The total weight of `owned`, kept with it.
    pub(super) owned_weight: i64,
    /// Bumped whenever ownership is forgotten, so a tick that started before does not adopt its view.
    pub(super) generation: u64,
    pub(super) ready: bool,
    pub(super) reread: bool,
    /// The local liveness deadline: the instant before the last successful heartbeat was sent, plus
    /// four fifths of the TTL (see [`stop_after`]). It falls a fifth of the TTL before the database's
    /// expiry of the row, so past it this process must not act on its units, and its reconciler hears
    /// so before another process may claim them.
    pub(super) live_until: Option<Instant>,
    /// Units chosen to shed: the reconciler has been told they are lost, the database still says
    /// they are this process's until the shed statement commits. Never in `owned`, never re-read
    /// into it, and counted as owned in what the process row reports.
    pub(super) shedding: Holds,
    /// For each unit being shed, the number of the message that told the reconciler it is lost
    /// (see `Outbox::told`): it is given back only once that call returned.
    pub(super) shed_told: BTreeMap<Unit, u64>,
    /// The process row's counter of changes others made to its units, when `owned` was last known
    /// to match the database: while it stays put, a tick need not re-read the units.
    pub(super) seen_changes: Option<i64>,
    /// Whether the process row was settled at the last heartbeat (it counts in the fair share).
    pub(super) settled: bool,
}

/// How long after a heartbeat was sent a process acts on its units: four fifths of the TTL. The
/// last fifth is for telling the reconciler, which may be busy with an earlier callback, before the
/// database lets another process claim the units.
pub(super) fn stop_after(ttl: Duration) -> Duration {
    ttl - ttl / 5
}

impl Local {
    pub(super) fn live_at(&self, now: Instant) -> bool {
        self.live_until.is_some_and(|until| now < until)
    }

    /// Forgets every owned unit, returning them (to report as lost); the next tick re-reads.
    pub(super) fn forget_all(&mut self) -> Vec<Unit> {
        observe::units_owned(0);
        self.reread = true;
        self.generation += 1;
        self.owned_weight = 0;
        self.shedding.clear();
        self.shed_told.clear();
        Arc::unwrap_or_clone(std::mem::take(&mut self.owned))
            .into_keys()
            .collect()
    }

    /// Adopts what a tick found to be this process's (`truth`, of total weight `weight`), and the
    /// units it chose to shed, if the process is still live (`live_now`: judged after the tick's
    /// statements, and only if nothing forgot the ownership since the tick read it); else forgets
    /// everything. Returns the units lost (with why) and gained against the local view, which the
    /// caller queues for the reconciler while it still holds the state, so deliveries keep decision
    /// order. `changed` says the tick's view may differ from the local one; without it an unchanged
    /// view is recognised by identity. `changes` is the process row's counter the view was read at.
    pub(super) fn adopt(&mut self, view: View, live_now: bool) -> (Losses, Vec<Unit>) {
        let View {
            mut truth,
            mut weight,
            mut changed,
            mut shed,
            shed_landed,
            changes,
        } = view;
        // Gone from the database: the give-back landed although its answer was lost.
        for unit in &shed_landed {
            self.shedding.remove(unit);
        }
        if !live_now {
            truth = Arc::default();
            weight = 0;
            changed = true;
            shed.clear();
        }
        let (lost, gained) = if changed || !Arc::ptr_eq(&self.owned, &truth) {
            diff(&self.owned, &truth)
        } else {
            (Vec::new(), Vec::new())
        };
        let lost = Losses::of(lost, |unit| match shed.get(unit) {
            _ if !live_now => UnitLoss::Expired,
            Some(hold) if hold.removed => UnitLoss::Removed,
            Some(_) => UnitLoss::Shed,
            None => UnitLoss::Taken,
        });
        // A unit claimed again while its give-back was pending is owned (and told gained) anew: it
        // must not be given back from under its new work.
        self.shedding.retain(|unit, _| !truth.contains_key(unit));
        self.owned = truth;
        self.owned_weight = weight;
        // Told lost (by the caller, with `lost`), given back once delivered.
        self.shedding.extend(shed);
        let shedding = &self.shedding;
        self.shed_told.retain(|unit, _| shedding.contains_key(unit));
        self.ready = true;
        self.reread = !live_now;
        self.seen_changes = changes;
        (lost, gained)
    }

    /// The digest of what the database should say names this process: its units and those it is
    /// shedding (still its own in the database until the give-back commits).
    pub(super) fn digest(&self) -> Digest {
        let shedding = self
            .shedding
            .iter()
            .filter(|(unit, _)| !self.owned.contains_key(*unit));
        let mut digest = Digest::default();
        for (_, hold) in self.owned.iter().chain(shedding) {
            digest.units += 1;
            digest.marks += i64::from(hold.mark);
        }
        digest
    }

    /// What the database says this process owns: its units and those it is shedding.
    pub(super) fn reported(&self) -> Reported {
        let count = self.owned.len() + self.shedding.len();
        Reported {
            count: count as i32,
            weight: self.owned_weight + weight_of(&self.shedding),
        }
    }
}

/// What one tick found: the units this process owns after its claims and sheds, their weight,
/// whether that may differ from the local view, the units it chose to shed, the units being shed
/// that a re-read found no longer this process's (their give-back landed), and the process row's
/// change counter it read.
pub(super) struct View {
    pub(super) truth: Arc<Holds>,
    pub(super) weight: i64,
    pub(super) changed: bool,
    pub(super) shed: Holds,
    pub(super) shed_landed: Vec<Unit>,
    pub(super) changes: Option<i64>,
}

/// Units lost, grouped by why, each group in unit order; the groups in a fixed order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Losses(pub(super) Vec<(UnitLoss, Vec<Unit>)>);

impl Losses {
    /// Groups `lost` by the reason `why` gives each unit.
    pub(super) fn of(lost: Vec<Unit>, mut why: impl FnMut(&Unit) -> UnitLoss) -> Losses {
        let mut groups: Vec<(UnitLoss, Vec<Unit>)> = Vec::new();
        for unit in lost {
            let reason = why(&unit);
            match groups.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, units)) => units.push(unit),
                None => groups.push((reason, vec![unit])),
            }
        }
        groups.sort_by_key(|(reason, _)| LOSS_ORDER.iter().position(|r| r == reason));
        Losses(groups)
    }

    /// Every unit lost, whatever the reason.
    pub(super) fn units(&self) -> Vec<Unit> {
        let mut all: Vec<Unit> = self.0.iter().flat_map(|(_, u)| u.iter().cloned()).collect();
        all.sort();
        all
    }
}

/// The order in which one decision's losses are told.
const LOSS_ORDER: [UnitLoss; 5] = [
    UnitLoss::Expired,
    UnitLoss::Taken,
    UnitLoss::Removed,
    UnitLoss::Shed,
    UnitLoss::Released,
];

/// The total weight of `units`, disabled ones (weight 0) counting nothing.
pub(super) fn weight_of(units: &Holds) -> i64 {
    units.values().map(|h| i64::from(h.weight.max(0))).sum()
}

/// The units of `old` missing from `new` (lost), and of `new` missing from `old` (gained). A unit
/// in both under another token is both: it was claimed anew, so its earlier tenure ended (another
/// process may have owned it in between).
fn diff(old: &Holds, new: &Holds) -> (Vec<Unit>, Vec<Unit>) {
    let same = |unit: &Unit, hold: &Hold, other: &Holds| {
        other.get(unit).is_some_and(|h| h.token == hold.token)
    };
    let lost = old
        .iter()
        .filter(|(u, h)| !same(u, h, new))
        .map(|(u, _)| u.clone())
        .collect();
    let gained = new
        .iter()
        .filter(|(u, h)| !same(u, h, old))
        .map(|(u, _)| u.clone())
        .collect();
    (lost, gained)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(shards: &[i32]) -> Holds {
        shards
            .iter()
            .map(|s| {
                let hold = Hold {
                    weight: 1,
                    token: i64::from(*s),
                    removed: false,
                    mark: *s * 7,
                };
                (Unit::new("t", *s).unwrap(), hold)
            })
            .collect()
    }

    fn lost(losses: &Losses) -> Vec<i32> {
        shards(&losses.units())
    }

    fn shards(units: &[Unit]) -> Vec<i32> {
        units.iter().map(|u| u.shard).collect()
    }

    fn view(truth: Holds, changed: bool) -> View {
        let weight = weight_of(&truth);
        View {
            truth: Arc::new(truth),
            weight,
            changed,
            shed: BTreeMap::new(),
            shed_landed: Vec::new(),
            changes: Some(7),
        }
    }

    #[test]
    fn adopting_reports_what_was_lost_and_gained() {
        let mut local = Local::default();
        let (losses, gained) = local.adopt(view(units(&[1, 2, 3]), true), true);
        assert_eq!((lost(&losses), shards(&gained)), (vec![], vec![1, 2, 3]));
        let (losses, gained) = local.adopt(view(units(&[2, 3, 4]), true), true);
        assert_eq!((lost(&losses), shards(&gained)), (vec![1], vec![4]));
        assert_eq!(losses.0[0].0, UnitLoss::Taken, "gone from the database");
        assert_eq!((local.owned.len(), local.owned_weight), (3, 3));
        assert!(local.ready && !local.reread);
        assert_eq!(local.seen_changes, Some(7));
    }

    #[test]
    fn a_unit_claimed_anew_under_another_token_is_lost_then_gained() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2]), true), true);
        let mut again = units(&[1, 2]);
        again.get_mut(&Unit::new("t", 2).unwrap()).unwrap().token = 99;
        let (losses, gained) = local.adopt(view(again, true), true);
        assert_eq!((lost(&losses), shards(&gained)), (vec![2], vec![2]));
        assert_eq!(losses.0[0].0, UnitLoss::Taken);
    }

    #[test]
    fn a_removed_unit_given_back_is_lost_as_removed_apart_from_the_shed_ones() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2, 3]), true), true);
        let mut next = view(units(&[1]), true);
        next.shed = units(&[2, 3]);
        next.shed
            .get_mut(&Unit::new("t", 3).unwrap())
            .unwrap()
            .removed = true;
        let (losses, _) = local.adopt(next, true);
        assert_eq!(
            losses.0,
            vec![
                (UnitLoss::Removed, vec![Unit::new("t", 3).unwrap()]),
                (UnitLoss::Shed, vec![Unit::new("t", 2).unwrap()]),
            ]
        );
    }

    #[test]
    fn an_unchanged_view_reports_nothing() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2]), true), true);
        let same = View {
            truth: local.owned.clone(),
            weight: local.owned_weight,
            changed: false,
            shed: BTreeMap::new(),
            shed_landed: Vec::new(),
            changes: Some(7),
        };
        assert_eq!(local.adopt(same, true), (Losses::default(), vec![]));
        assert_eq!(local.owned.len(), 2);
    }

    #[test]
    fn a_process_no_longer_live_forgets_everything_and_sheds_nothing() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2]), true), true);
        let mut late = view(units(&[1, 2, 3]), true);
        late.shed = units(&[2]);
        let (losses, gained) = local.adopt(late, false);
        assert_eq!((lost(&losses), shards(&gained)), (vec![1, 2], vec![]));
        assert_eq!(losses.0.len(), 1);
        assert_eq!(losses.0[0].0, UnitLoss::Expired);
        assert!(local.owned.is_empty() && local.shedding.is_empty());
        assert_eq!(local.owned_weight, 0);
        assert!(local.reread, "the next tick re-reads what it owns");
    }

    #[test]
    fn units_chosen_to_shed_are_kept_apart_until_given_back() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2, 3]), true), true);
        let mut shedding = view(units(&[1, 2]), true);
        shedding.shed = units(&[3]);
        let (losses, gained) = local.adopt(shedding, true);
        assert_eq!((lost(&losses), shards(&gained)), (vec![3], vec![]));
        assert_eq!(losses.0[0].0, UnitLoss::Shed);
        assert_eq!(local.shedding.len(), 1);
        assert_eq!(
            local.reported(),
            Reported {
                count: 3,
                weight: 3
            },
            "the row still counts the unit being shed"
        );
    }

    #[test]
    fn a_unit_claimed_again_while_being_shed_is_owned_and_no_longer_given_back() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2, 3]), true), true);
        let mut shedding = view(units(&[1, 2]), true);
        shedding.shed = units(&[3]);
        local.adopt(shedding, true);
        // The give-back failed; a later claim takes unit 3 back.
        let (losses, gained) = local.adopt(view(units(&[1, 2, 3]), true), true);
        assert_eq!((lost(&losses), shards(&gained)), (vec![], vec![3]));
        assert!(
            local.shedding.is_empty(),
            "unit 3 is worked on again: it must not be given back"
        );
        assert_eq!(
            local.reported(),
            Reported {
                count: 3,
                weight: 3
            }
        );
    }

    #[test]
    fn a_give_back_that_landed_unseen_is_forgotten_at_the_re_read() {
        let mut local = Local::default();
        local.adopt(view(units(&[1, 2, 3]), true), true);
        let mut shedding = view(units(&[1, 2]), true);
        shedding.shed = units(&[3]);
        local.adopt(shedding, true);
        let mut reread = view(units(&[1, 2]), true);
        reread.shed_landed = vec![Unit::new("t", 3).unwrap()];
        assert_eq!(local.adopt(reread, true), (Losses::default(), vec![]));
        assert!(local.shedding.is_empty());
        assert_eq!(
            local.reported(),
            Reported {
                count: 2,
                weight: 2
            },
            "the row no longer counts unit 3"
        );
    }
}
