//! Fair-share arithmetic: each process's target, how much it claims, and which units it sheds. Pure
//! functions, no database.
//!
//! Every process computes the same assignment of targets from the same facts (the total weight and
//! the weight each live process reports): with `n` live processes and total weight `W`, every
//! process's target is `floor(W / n)`, and the `W mod n` processes that own the most (ties broken by
//! process id) get one more. A process below its target claims the difference; a process above it
//! sheds the difference; nobody else moves. So the fleet settles at floor or ceil of `W / n` for
//! every `W / n`, and only units that must move move: after a join, only the newcomer's share; after a
//! leave or a crash, only the departed process's units. A band around the fair share (shed only
//! well above it) cannot do that: with small shares it never settles (3 units on 2 processes went
//! 2/1, 1/2, 1/1, ...), and it leaves the fleet unbalanced within the band.
//!
//! With weighted units a process claims while it is below its target (so it can end above it by less
//! than one unit's weight) and sheds only what keeps it at or above its target: the fleet settles
//! within the largest unit weight of the targets.

use super::Unit;

/// One live process as the assignment sees it: its id and the weight it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member<'a> {
    pub(crate) id: &'a str,
    pub(crate) weight: i64,
}

/// This process's target weight: `floor(total / n)`, plus one when it ranks among the first
/// `total mod n` of the live processes, `n` counting this process and `others` (the other live
/// processes). Processes that own more than the floor rank first (they keep the extra they hold:
/// fewer moves), then by process id. The ranking does not change while processes claim up to the
/// floor, so concurrent claimers agree on it within a round.
pub(crate) fn target(total: i64, me: &Member<'_>, others: &[Member<'_>]) -> i64 {
    let n = others.len() as i64 + 1;
    let total = total.max(0);
    let (floor, extra) = (total / n, total % n);
    let mine = (me.weight <= floor, me.id);
    let above = others
        .iter()
        .filter(|o| (o.weight <= floor, o.id) < mine)
        .count() as i64;
    floor + i64::from(above < extra)
}

/// How much weight to claim this tick: the deficit to the target, no more than is claimable and no
/// more than the per-tick cap.
pub(crate) fn claim_budget(owned: i64, target: i64, claimable: i64, max_per_tick: i64) -> i64 {
    (target - owned)
        .max(0)
        .min(claimable.max(0))
        .min(max_per_tick.max(0))
}

/// One owned unit as the shed choice sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) unit: Unit,
    pub(crate) weight: i32,
    pub(crate) in_flight: usize,
}

/// Which units to shed down to `target`: units of weight 0 (disabled) always; then, while above the
/// target, the lightest units with no in-flight work whose removal keeps it at or above the target.
/// Busy units are never shed; another tick sheds them once idle.
pub(crate) fn choose_shed(held: &[Held], target: i64) -> Vec<Unit> {
    let mut shed: Vec<Unit> = held
        .iter()
        .filter(|h| h.weight <= 0)
        .map(|h| h.unit.clone())
        .collect();
    let mut owned: i64 = held.iter().map(|h| i64::from(h.weight.max(0))).sum();
    if owned <= target {
        return shed;
    }
    let mut idle: Vec<&Held> = held
        .iter()
        .filter(|h| h.weight > 0 && h.in_flight == 0)
        .collect();
    idle.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.unit.cmp(&b.unit)));
    for h in idle {
        let w = i64::from(h.weight);
        if owned - w < target {
            // Lighter units came first: no later one fits either.
            break;
        }
        owned -= w;
        shed.push(h.unit.clone());
        if owned == target {
            break;
        }
    }
    shed
}

/// What one tick decides, before it touches the units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Claim up to this much weight.
    Claim(i64),
    /// Shed down to this target (if it claimed nothing).
    Shed(i64),
    /// Keep everything.
    Keep,
}

/// The facts a tick decides from: this process's owned weight and id, the other live processes, and
/// the weight nobody live owns (unowned units and units of expired processes).
#[derive(Debug, Clone)]
pub(crate) struct Facts<'a> {
    pub(crate) me: Member<'a>,
    pub(crate) others: &'a [Member<'a>],
    pub(crate) claimable: i64,
}

impl Facts<'_> {
    /// The total weight to share: everyone's plus what is claimable.
    pub(crate) fn total(&self) -> i64 {
        self.me.weight + self.others.iter().map(|o| o.weight).sum::<i64>() + self.claimable.max(0)
    }

    /// This process's target.
    pub(crate) fn target(&self) -> i64 {
        target(self.total(), &self.me, self.others)
    }

    /// Claim what it lacks (capped), else shed what it has above its target, else keep. With
    /// `disabled` (it owns units whose weight is now 0) it sheds even at its target: a shed always
    /// gives back units of weight 0 (see [`choose_shed`]).
    pub(crate) fn decide(&self, max_per_tick: i64, disabled: bool) -> Step {
        let target = self.target();
        let budget = claim_budget(self.me.weight, target, self.claimable, max_per_tick);
        if budget > 0 {
            Step::Claim(budget)
        } else if self.me.weight > target || disabled {
            // Owned disabled units (weight 0) are given back even at the target.
            Step::Shed(target)
        } else {
            Step::Keep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(shard: i32) -> Unit {
        Unit::new("t", shard).unwrap()
    }

    fn idle(weights: &[i32]) -> Vec<Held> {
        weights
            .iter()
            .enumerate()
            .map(|(s, w)| Held {
                unit: unit(s as i32),
                weight: *w,
                in_flight: 0,
            })
            .collect()
    }

    /// Totals and process counts with small shares that do not divide evenly.
    const SMALL_SHARES: [(i64, usize); 8] = [
        (1, 2),
        (3, 2),
        (3, 4),
        (4, 3),
        (7, 2),
        (15, 4),
        (20, 9),
        (35, 10),
    ];

    #[test]
    fn targets_are_floor_or_ceil_and_sum_to_the_total() {
        for (total, n) in SMALL_SHARES {
            let ids: Vec<String> = (0..n).map(|i| format!("p{i:02}")).collect();
            let weights: Vec<i64> = (0..n).map(|i| (i * 7 % 5) as i64).collect();
            let members: Vec<Member<'_>> = ids
                .iter()
                .zip(&weights)
                .map(|(id, w)| Member { id, weight: *w })
                .collect();
            let targets: Vec<i64> = (0..members.len())
                .map(|i| {
                    let others: Vec<Member<'_>> = members
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| *j != i)
                        .map(|(_, m)| m.clone())
                        .collect();
                    target(total, &members[i], &others)
                })
                .collect();
            assert_eq!(
                targets.iter().sum::<i64>(),
                total,
                "{total}/{n}: {targets:?}"
            );
            let floor = total / n as i64;
            assert!(targets.iter().all(|t| *t == floor || *t == floor + 1));
        }
    }

    #[test]
    fn those_above_the_floor_keep_the_extra_unit() {
        let (a, b, c) = (
            Member { id: "a", weight: 1 },
            Member { id: "b", weight: 2 },
            Member { id: "c", weight: 0 },
        );
        // 4 over 3: one process gets 2, the one that owns 2 now.
        assert_eq!(target(4, &b, &[a.clone(), c.clone()]), 2);
        assert_eq!(target(4, &a, &[b.clone(), c.clone()]), 1);
        assert_eq!(target(4, &c, &[a.clone(), b.clone()]), 1);
        // Ties go to the smaller id.
        let (x, y) = (Member { id: "x", weight: 1 }, Member { id: "y", weight: 1 });
        assert_eq!(target(3, &x, std::slice::from_ref(&y)), 2);
        assert_eq!(target(3, &y, std::slice::from_ref(&x)), 1);
    }

    #[test]
    fn budget_is_the_deficit_capped_by_claimable_and_per_tick() {
        assert_eq!(claim_budget(0, 25, 100, 1024), 25);
        assert_eq!(claim_budget(20, 25, 100, 1024), 5);
        assert_eq!(claim_budget(30, 25, 100, 1024), 0);
        assert_eq!(claim_budget(0, 25, 10, 1024), 10);
        assert_eq!(claim_budget(0, 12_500, 100_000, 1024), 1024);
    }

    #[test]
    fn shedding_stops_at_the_target_prefers_light_idle_units_and_never_busy_ones() {
        assert!(choose_shed(&idle(&[1; 20]), 20).is_empty());
        assert_eq!(choose_shed(&idle(&[1; 25]), 20).len(), 5);
        let mut held = idle(&[3; 10]);
        held.push(Held {
            unit: unit(10),
            weight: 1,
            in_flight: 0,
        });
        held.push(Held {
            unit: unit(11),
            weight: 1,
            in_flight: 2,
        });
        held[0].in_flight = 1;
        // Owned 32, target 20: the idle weight-1 unit first, then weight-3 units down to 22 (20 can
        // not be reached without going below it).
        let shed = choose_shed(&held, 20);
        assert_eq!(shed[0], unit(10));
        assert!(
            !shed.contains(&unit(11)) && !shed.contains(&unit(0)),
            "in flight"
        );
        let left = 32 - 1 - 3 * (shed.len() as i64 - 1);
        assert_eq!(left, 22);
        let busy: Vec<Held> = idle(&[1; 30])
            .into_iter()
            .map(|h| Held { in_flight: 1, ..h })
            .collect();
        assert!(choose_shed(&busy, 10).is_empty());
        // Disabled units always go back.
        assert_eq!(choose_shed(&idle(&[0, 1]), 10), vec![unit(0)]);
    }

    /// One round: each live process in turn ticks with the true state, as the leasers would. Units
    /// have weight 1. Returns how many units moved (claimed or shed) in the round.
    fn round(owned: &mut [i64], ids: &[String], total: i64) -> i64 {
        let mut moved = 0;
        for p in 0..owned.len() {
            let members: Vec<Member<'_>> = ids
                .iter()
                .zip(owned.iter())
                .map(|(id, w)| Member { id, weight: *w })
                .collect();
            let others: Vec<Member<'_>> = members
                .iter()
                .enumerate()
                .filter(|(q, _)| *q != p)
                .map(|(_, m)| m.clone())
                .collect();
            let claimable = total - owned.iter().sum::<i64>();
            let facts = Facts {
                me: members[p].clone(),
                others: &others,
                claimable,
            };
            match facts.decide(1024, false) {
                Step::Claim(budget) => {
                    owned[p] += budget;
                    moved += budget;
                }
                Step::Shed(target) => {
                    let shed = choose_shed(&idle(&vec![1; owned[p] as usize]), target).len() as i64;
                    owned[p] -= shed;
                    moved += shed;
                }
                Step::Keep => {}
            }
        }
        moved
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("{i:08x}-0000-4000-8000-000000000000"))
            .collect()
    }

    fn settled(owned: &[i64], total: i64) -> bool {
        let floor = total / owned.len() as i64;
        owned.iter().all(|w| *w == floor || *w == floor + 1) && owned.iter().sum::<i64>() == total
    }

    #[test]
    fn every_shape_settles_at_floor_or_ceil_within_three_rounds_then_nothing_moves() {
        for (total, n) in SMALL_SHARES.into_iter().chain([(1001, 8), (100, 4)]) {
            // Start from one process owning everything, then the others join.
            let ids = ids(n);
            let mut owned = vec![0; n];
            owned[n - 1] = total;
            let mut rounds = Vec::new();
            for _ in 0..3 {
                round(&mut owned, &ids, total);
                rounds.push(owned.clone());
            }
            assert!(
                settled(&owned, total),
                "{total}/{n}, rounds 1-3: {rounds:?}"
            );
            for _ in 0..5 {
                assert_eq!(round(&mut owned, &ids, total), 0, "{total}/{n}: {owned:?}");
            }
        }
    }

    #[test]
    fn a_join_moves_only_the_newcomers_share_and_a_crash_only_the_departed_units() {
        // Eight processes hold 1,000 units at 125; a ninth joins.
        let ids = ids(9);
        let mut owned = vec![125; 8];
        owned.push(0);
        let moved = round(&mut owned, &ids, 1000) + round(&mut owned, &ids, 1000);
        assert!(settled(&owned, 1000), "{owned:?}");
        // The newcomer's share is shed once and claimed once: 111 units, both ways.
        assert_eq!(owned[8], 111);
        assert_eq!(moved, 2 * 111, "{owned:?}");
        assert_eq!(round(&mut owned, &ids, 1000), 0);

        // 310 units on 40 processes, 10 leave at once (their units become claimable).
        let ids = ids_n(40);
        let mut owned: Vec<i64> = (0..40).map(|i| if i < 30 { 8 } else { 7 }).collect();
        assert_eq!(owned.iter().sum::<i64>(), 310);
        let departed: i64 = owned[30..].iter().sum();
        owned.truncate(30);
        let ids = &ids[..30];
        let mut moved = 0;
        let mut history = Vec::new();
        for _ in 0..3 {
            moved += round(&mut owned, ids, 310);
            history.push(owned.clone());
        }
        assert!(settled(&owned, 310), "{history:?}");
        assert_eq!(moved, departed, "only the departed units move: {history:?}");
    }

    fn ids_n(n: usize) -> Vec<String> {
        ids(n)
    }

    #[test]
    fn weighted_units_settle_within_one_unit_weight() {
        // Weights 5, 3, 3, 1, 1, 1 (14) over 2 processes: targets 7 and 7.
        let held = vec![
            Held {
                unit: unit(0),
                weight: 5,
                in_flight: 0,
            },
            Held {
                unit: unit(1),
                weight: 3,
                in_flight: 0,
            },
            Held {
                unit: unit(2),
                weight: 3,
                in_flight: 0,
            },
        ];
        // Owns 11, target 7: sheds a 3 (down to 8), not the 5 (down to 6).
        assert_eq!(choose_shed(&held, 7), vec![unit(1)]);
    }

    #[test]
    fn a_process_owning_disabled_units_sheds_at_its_target() {
        let others = [Member { id: "b", weight: 5 }];
        let facts = Facts {
            me: Member { id: "a", weight: 5 },
            others: &others,
            claimable: 0,
        };
        assert_eq!(facts.decide(1024, false), Step::Keep);
        assert_eq!(facts.decide(1024, true), Step::Shed(5));
    }
}
