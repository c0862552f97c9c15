//! Fair-share arithmetic: how much a process claims, and which units it sheds. Pure functions.
//!
//! The reference package budgets each tick at `ceil(claimable / live)`, which converges only
//! geometrically: with four processes and 100 units claimed round-robin, the last process has 19
//! units after three rounds. pgtenure budgets by the process's *deficit* to its fair share, so a
//! process claims what it lacks in one tick (capped by `max_claim_per_tick`) and the fleet is at fair
//! share after one round when nothing else changes. [`tests`] show both, round by round.

use super::Unit;

/// A process's fair share of `total_weight` among `live` processes: `ceil(total / live)`.
pub(crate) fn fair_share(total_weight: i64, live: i64) -> i64 {
    if live <= 0 {
        return 0;
    }
    (total_weight.max(0) + live - 1) / live
}

/// How much weight to claim this tick: the deficit to the fair share, no more than is claimable and
/// no more than the per-tick cap.
pub(crate) fn claim_budget(owned: i64, fair: i64, claimable: i64, max_per_tick: i64) -> i64 {
    (fair - owned)
        .max(0)
        .min(claimable.max(0))
        .min(max_per_tick.max(0))
}

/// Whether a process that owns `owned` is far enough above its fair share to shed.
pub(crate) fn over_threshold(owned: i64, fair: i64, hysteresis: f64) -> bool {
    owned as f64 > fair as f64 * (1.0 + hysteresis)
}

/// Whether, and down to what, a process that claimed nothing should shed: `(target, hysteresis)`.
///
/// The reference rule sheds only above fair share × (1 + hysteresis). That starves a newcomer when
/// the fleet grows by a small fraction: eight processes with 125 units each, a ninth joins, the fair
/// share becomes 112, and 125 is below 112 × 1.2, so nobody sheds and nothing is claimable. So a
/// process also sheds when another live process is below fair share × (1 - hysteresis) and what is
/// claimable does not cover that process's deficit; then it sheds down to the *floor* share
/// (`floor`, total / live rounded down), since with everyone at the rounded-up fair share the last
/// process would get only the remainder. Returns `None` when it should keep what it has.
pub(crate) fn shed_plan(
    owned: i64,
    fair: i64,
    floor: i64,
    hysteresis: f64,
    claimable: i64,
    others_min: Option<i64>,
) -> Option<(i64, f64)> {
    if over_threshold(owned, fair, hysteresis) {
        return Some((fair, hysteresis));
    }
    let starving = others_min.filter(|least| (*least as f64) < fair as f64 * (1.0 - hysteresis));
    let uncovered = starving.is_some_and(|least| claimable.max(0) < fair - least);
    (owned > floor && uncovered).then_some((floor, 0.0))
}

/// One owned unit as the shed choice sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) unit: Unit,
    pub(crate) weight: i32,
    pub(crate) in_flight: usize,
}

/// Which units to shed: none unless the process owns more than `fair * (1 + hysteresis)`; then the
/// lightest units with no in-flight work, while shedding keeps it at or above its fair share.
/// Units of weight 0 (disabled) are always given back.
pub(crate) fn choose_shed(held: &[Held], fair: i64, hysteresis: f64) -> Vec<Unit> {
    let mut shed: Vec<Unit> = held
        .iter()
        .filter(|h| h.weight <= 0)
        .map(|h| h.unit.clone())
        .collect();
    let mut owned: i64 = held.iter().map(|h| i64::from(h.weight.max(0))).sum();
    if !over_threshold(owned, fair, hysteresis) {
        return shed;
    }
    let mut idle: Vec<&Held> = held
        .iter()
        .filter(|h| h.weight > 0 && h.in_flight == 0)
        .collect();
    idle.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.unit.cmp(&b.unit)));
    for h in idle {
        let w = i64::from(h.weight);
        if owned - w < fair {
            continue;
        }
        owned -= w;
        shed.push(h.unit.clone());
        if owned <= fair {
            break;
        }
    }
    shed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(shard: i32) -> Unit {
        Unit::new("t", shard).unwrap()
    }

    #[test]
    fn fair_share_rounds_up_and_survives_no_processes() {
        assert_eq!(fair_share(100, 4), 25);
        assert_eq!(fair_share(101, 4), 26);
        assert_eq!(fair_share(100, 3), 34);
        assert_eq!(fair_share(0, 3), 0);
        assert_eq!(fair_share(10, 0), 0);
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
    fn shedding_waits_for_the_hysteresis_and_stops_at_fair_share() {
        let held: Vec<Held> = (0..25)
            .map(|s| Held {
                unit: unit(s),
                weight: 1,
                in_flight: 0,
            })
            .collect();
        assert!(choose_shed(&held, 21, 0.2).is_empty(), "25 <= 21 * 1.2");
        let shed = choose_shed(&held, 20, 0.2);
        assert_eq!(shed.len(), 5, "25 > 24: down to 20");
    }

    #[test]
    fn shedding_prefers_light_idle_units_and_never_busy_ones() {
        let mut held: Vec<Held> = (0..10)
            .map(|s| Held {
                unit: unit(s),
                weight: 3,
                in_flight: 0,
            })
            .collect();
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
        // Owned weight 32, fair 20: shed the idle weight-1 unit first, then weight-3 units.
        let shed = choose_shed(&held, 20, 0.2);
        assert_eq!(shed[0], unit(10));
        assert!(!shed.contains(&unit(11)), "in flight");
        assert!(!shed.contains(&unit(0)), "in flight");
        let left: i64 = 32
            - shed
                .iter()
                .map(|u| if *u == unit(10) { 1 } else { 3 })
                .sum::<i64>();
        assert!((20..=22).contains(&left), "left {left}");
        // Everything busy: nothing to shed.
        let busy: Vec<Held> = (0..30)
            .map(|s| Held {
                unit: unit(s),
                weight: 1,
                in_flight: 1,
            })
            .collect();
        assert!(choose_shed(&busy, 10, 0.2).is_empty());
    }

    #[test]
    fn a_starving_process_makes_the_others_shed_down_to_the_floor_share() {
        // Eight at 125, a ninth joins with nothing: fair 112 (floor 111), threshold 134.4.
        assert_eq!(shed_plan(125, 112, 111, 0.2, 0, Some(0)), Some((111, 0.0)));
        let held: Vec<Held> = (0..125)
            .map(|s| Held {
                unit: unit(s),
                weight: 1,
                in_flight: 0,
            })
            .collect();
        assert_eq!(choose_shed(&held, 111, 0.0).len(), 14);
        // Nobody starving, or enough claimable, or at the floor already: keep.
        assert_eq!(shed_plan(125, 112, 111, 0.2, 0, Some(104)), None);
        assert_eq!(
            shed_plan(125, 112, 111, 0.2, 13, Some(0)),
            Some((111, 0.0)),
            "13 claimable, 112 lacking"
        );
        assert_eq!(
            shed_plan(125, 112, 111, 0.2, 112, Some(0)),
            None,
            "the starving one can claim"
        );
        assert_eq!(shed_plan(111, 112, 111, 0.2, 0, Some(0)), None);
        assert_eq!(shed_plan(125, 112, 111, 0.2, 0, None), None);
        // Far above: the ordinary rule, down to the fair share.
        assert_eq!(
            shed_plan(140, 112, 111, 0.2, 0, Some(112)),
            Some((112, 0.2))
        );
    }

    #[test]
    fn weight_zero_units_are_always_given_back() {
        let held = vec![
            Held {
                unit: unit(0),
                weight: 0,
                in_flight: 0,
            },
            Held {
                unit: unit(1),
                weight: 1,
                in_flight: 0,
            },
        ];
        assert_eq!(choose_shed(&held, 10, 0.2), vec![unit(0)]);
    }

    /// Eight processes own 1,000 units; a ninth joins: with the starvation rule it has its share
    /// after one round, and nothing moves after that.
    #[test]
    fn a_ninth_process_joining_eight_gets_its_share_in_one_round() {
        let mut owned = vec![125_i64; 8];
        owned.push(0);
        let total = 1000;
        let mut history = Vec::new();
        for _ in 0..3 {
            for p in 0..owned.len() {
                let fair = fair_share(total, 9);
                let claimable = total - owned.iter().sum::<i64>();
                let take = claim_budget(owned[p], fair, claimable, 1024);
                owned[p] += take;
                if take == 0 {
                    let others_min = (0..owned.len()).filter(|q| *q != p).map(|q| owned[q]).min();
                    let plan = shed_plan(owned[p], fair, total / 9, 0.2, claimable, others_min);
                    if let Some((target, h)) = plan {
                        let held: Vec<Held> = (0..owned[p] as i32)
                            .map(|s| Held {
                                unit: unit(s),
                                weight: 1,
                                in_flight: 0,
                            })
                            .collect();
                        owned[p] -= choose_shed(&held, target, h).len() as i64;
                    }
                }
            }
            history.push(owned.clone());
        }
        println!("eight plus a ninth, rounds 1-3: {history:?}");
        assert_eq!(
            history[0],
            vec![111, 111, 111, 111, 111, 111, 111, 111, 112]
        );
        assert_eq!(history[2], history[0], "stable");
    }

    /// Round-robin ticks over a shared pool of `units` unit-weight units, each process seeing the
    /// true state; returns each process's count after every round.
    fn simulate(
        processes: usize,
        units: i64,
        rounds: usize,
        budget: impl Fn(i64, i64, i64, i64) -> i64,
    ) -> Vec<Vec<i64>> {
        let mut owned = vec![0_i64; processes];
        let mut history = Vec::new();
        for _ in 0..rounds {
            for p in 0..processes {
                let claimable = units - owned.iter().sum::<i64>();
                let fair = fair_share(units, processes as i64);
                let take = budget(owned[p], fair, claimable, processes as i64).min(claimable);
                owned[p] += take;
                if take == 0 && over_threshold(owned[p], fair, 0.2) {
                    owned[p] = fair;
                }
            }
            history.push(owned.clone());
        }
        history
    }

    #[test]
    fn deficit_budgets_reach_fair_share_in_one_round_where_the_seeds_take_many() {
        let ours = simulate(4, 100, 3, |owned, fair, claimable, _| {
            claim_budget(owned, fair, claimable, 1024)
        });
        // The reference budget: its fair share of the claimable units, never beyond its fair share.
        let seed = simulate(4, 100, 6, |owned, fair, claimable, live| {
            ((claimable + live - 1) / live).min((fair - owned).max(0))
        });
        println!("pgtenure, rounds 1-3: {ours:?}");
        println!("reference package, rounds 1-6: {seed:?}");
        assert_eq!(ours[0], vec![25, 25, 25, 25]);
        assert_eq!(ours[2], vec![25, 25, 25, 25]);
        assert_eq!(seed[2][3], 19, "the reference package after three rounds");
        assert_eq!(seed[5][3], 23, "the reference package after six rounds");
    }
}
