//! A leaser's local state: what it owns, what it is shedding, its liveness deadline. [`Local`] is its
//! one owner: other files read it and change it only through the methods below, each named for
//! what the change means.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::holds::{diff, weight_of, Digest, Holds};
use super::sql::{Beat, Reported};
use super::unit::{Unit, UnitLoss};
use crate::observe;

#[derive(Default)]
pub(super) struct Local {
    /// Shared with a running tick, which copies it only if it changes something (copy on write).
    owned: Arc<Holds>,
    /// The total weight of `owned`, kept with it.
    owned_weight: i64,
    /// Bumped whenever ownership is forgotten, so a tick that started before does not adopt its view.
    generation: u64,
    ready: bool,
    reread: bool,
    /// The local liveness deadline: the instant before the last successful heartbeat was sent, plus
    /// four fifths of the TTL (see [`stop_after`]). It falls a fifth of the TTL before the database's
    /// expiry of the row, so past it this process must not act on its units, and its reconciler hears
    /// so before another process may claim them.
    live_until: Option<Instant>,
    /// Units chosen to shed: the reconciler has been told they are lost, the database still says
    /// they are this process's until the shed statement commits. Never in `owned`, never re-read
    /// into it, and counted as owned in what the process row reports.
    shedding: Holds,
    /// For each unit being shed, the number of the message that told the reconciler it is lost
    /// (see `Outbox::told`): it is given back only once that call returned.
    shed_told: BTreeMap<Unit, u64>,
    /// The process row's counter of changes others made to its units, when `owned` was last known
    /// to match the database: while it stays put, a tick need not re-read the units.
    seen_changes: Option<i64>,
    /// Whether the process row was settled at the last heartbeat (it counts in the fair share).
    settled: bool,
}

/// How long after a heartbeat was sent a process acts on its units: four fifths of the TTL. The
/// last fifth is for telling the reconciler, which may be busy with an earlier callback, before the
/// database lets another process claim the units.
pub(super) fn stop_after(ttl: Duration) -> Duration {
    ttl - ttl / 5
}

/// A heartbeat that found the row lapsed (or answered late): the units forgotten, to report as
/// expired, and whether it was the first beat (which finds no row, so says lapsed: nothing to warn
/// of).
pub(super) struct Lapse {
    pub(super) lost: Vec<Unit>,
    pub(super) first: bool,
}

/// What a tick starts from, as the local state knows it.
pub(super) struct Known {
    /// The owned units and their weight, when the local view is known to match the database.
    pub(super) current: Option<(Arc<Holds>, i64)>,
    /// Whether the local view was believed to match but the rows naming this process have another
    /// digest: they changed in the database behind its back.
    pub(super) drifted: bool,
    /// The generation the view was taken at (see [`Local::unchanged_since`]).
    pub(super) generation: u64,
    /// The units being shed.
    pub(super) shedding: Holds,
}

/// What the local state says: read-only.
impl Local {
    pub(super) fn live_at(&self, now: Instant) -> bool {
        self.live_until.is_some_and(|until| now < until)
    }

    /// The local liveness deadline, if a heartbeat has succeeded.
    pub(super) fn live_until(&self) -> Option<Instant> {
        self.live_until
    }

    /// Whether a tick has succeeded.
    pub(super) fn ready(&self) -> bool {
        self.ready
    }

    /// Whether the process row was settled at the last heartbeat.
    pub(super) fn settled(&self) -> bool {
        self.settled
    }

    /// Whether the next tick re-reads what the database says this process owns.
    pub(super) fn must_reread(&self) -> bool {
        self.reread
    }

    /// Whether what the process row reports is known to match the database: the process has read
    /// its units since it started or lapsed, and nothing since made it doubt them.
    pub(super) fn knows_its_units(&self) -> bool {
        self.ready && !self.reread
    }

    /// Whether nothing forgot the ownership since `generation` ([`Known::generation`]).
    pub(super) fn unchanged_since(&self, generation: u64) -> bool {
        self.generation == generation
    }

    /// The units owned, in unit order.
    pub(super) fn owned_units(&self) -> Vec<Unit> {
        self.owned.keys().cloned().collect()
    }

    /// The fencing token of the claim of `unit`, if owned.
    pub(super) fn token(&self, unit: &Unit) -> Option<i64> {
        self.owned.get(unit).map(|hold| hold.token)
    }

    /// How many units are owned.
    pub(super) fn owned_count(&self) -> usize {
        self.owned.len()
    }

    /// The total weight of the units owned.
    pub(super) fn owned_weight(&self) -> i64 {
        self.owned_weight
    }

    /// The digest of what the database should say names this process: its units and those it is
    /// shedding (still its own in the database until the give-back commits).
    fn digest(&self) -> Digest {
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

    /// What a tick starts from: the owned units while the local view is known to match the
    /// database (the process row's change counter is still `changes`, and the rows naming this
    /// process have the local view's `digest`), and the units being shed.
    pub(super) fn known(&self, changes: Option<i64>, digest: Digest) -> Known {
        let trusted = self.knows_its_units() && self.seen_changes == changes;
        let current = trusted && self.digest() == digest;
        Known {
            current: current.then(|| (self.owned.clone(), self.owned_weight)),
            drifted: trusted && !current,
            generation: self.generation,
            shedding: self.shedding.clone(),
        }
    }

    /// Whether the reconciler has been told, and has returned, that `unit` (being shed) is lost,
    /// `told` saying whether a message (by number) was delivered.
    fn told_to_shed(&self, unit: &Unit, told: &impl Fn(u64) -> bool) -> bool {
        told(self.shed_told.get(unit).copied().unwrap_or(0))
    }

    /// Whether a unit being shed is still being told lost (see [`Local::told_to_shed`]).
    fn still_telling(&self, told: impl Fn(u64) -> bool) -> bool {
        self.shedding.keys().any(|u| !self.told_to_shed(u, &told))
    }

    /// Whether this process owns a unit, or a unit being shed is still being told lost.
    pub(super) fn owns_any(&self, told: impl Fn(u64) -> bool) -> bool {
        !self.owned.is_empty() || self.still_telling(told)
    }

    /// What a release keeps: the units owned (a tick may have adopted them since they were told
    /// lost) and those a concurrent tick chose to shed and is still telling about.
    pub(super) fn kept_at_release(&self, told: impl Fn(u64) -> bool) -> Vec<Unit> {
        self.owned
            .keys()
            .chain(
                self.shedding
                    .keys()
                    .filter(|u| !self.told_to_shed(u, &told)),
            )
            .cloned()
            .collect()
    }

    /// The units to give back now: being shed, never a unit owned (and worked on) again, nor one
    /// whose loss is still being told (the tick that chose it delivers on its own thread, perhaps
    /// after this one got here).
    pub(super) fn to_give_back(&self, told: impl Fn(u64) -> bool) -> Holds {
        self.shedding
            .iter()
            .filter(|(unit, _)| !self.owned.contains_key(*unit))
            .filter(|(unit, _)| self.told_to_shed(unit, &told))
            .map(|(unit, hold)| (unit.clone(), *hold))
            .collect()
    }
}

/// What changes the local state, each change named for what it means.
impl Local {
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

    /// The process row was deleted: forgets every owned unit and the liveness deadline.
    pub(super) fn left(&mut self) {
        self.forget_all();
        self.live_until = None;
    }

    /// The database may say something else than the local view (a claim may have landed without
    /// this process knowing, a give-back may have failed): the next tick re-reads.
    pub(super) fn reread_next_tick(&mut self) {
        self.reread = true;
    }

    /// A heartbeat sent when the process became live until `live_until` was answered `beat`, at
    /// `now`. If the row had lapsed, or the answer came after the previous beat's local deadline,
    /// other processes may have claimed its units: every owned unit is forgotten (returned in the
    /// [`Lapse`], to report as expired) and the next tick re-reads what the database says.
    pub(super) fn beat_answered(
        &mut self,
        beat: Beat,
        live_until: Instant,
        now: Instant,
    ) -> Option<Lapse> {
        // Answered after the previous beat's local deadline: the row may have expired before
        // this beat reached it, and another process may have claimed units meanwhile (the
        // statement's `lapsed` is judged on its own snapshot, which can predate that claim).
        let late = self.live_until.is_some_and(|until| now >= until);
        // No beat before (a first beat finds no row, and says lapsed): nothing to warn of.
        let first = self.live_until.is_none() && !self.ready;
        self.live_until = Some(live_until);
        self.settled = beat.settled;
        if !(beat.lapsed || late) {
            return None;
        }
        self.reread = true;
        let lost = self.forget_all();
        Some(Lapse { lost, first })
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

    /// The units being shed in `units` were told lost in message `message` (see `Outbox::told`):
    /// they are given back once it was delivered.
    pub(super) fn told_lost_in(&mut self, units: Vec<Unit>, message: u64) {
        for unit in units {
            self.shed_told.insert(unit, message);
        }
    }

    /// The give-back of the units chosen to shed `chosen` landed for `given`: they are no longer
    /// this process's. Fewer than chosen were skipped (a transaction still holds the row: given
    /// back at a later tick) or no longer this process's (a resend after the first attempt
    /// landed): the next tick re-reads, which tells the two apart.
    pub(super) fn gave_back(&mut self, given: &[Unit], chosen: usize) {
        for unit in given {
            self.shedding.remove(unit);
            self.shed_told.remove(unit);
        }
        if given.len() < chosen {
            self.reread = true;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::holds::Hold;

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
