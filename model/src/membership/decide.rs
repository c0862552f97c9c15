//! What a tick decides (`src/membership/tick.rs`, `fair.rs`, `warm_up.rs`), from the database as
//! stats.sql reads it at the step the decision is made: the fair share by weight, the warm-up
//! (a process counts, and claims, only once its row has settled or it owns units; in a cold fleet
//! it also waits until every other live process has settled, but only before its first claim),
//! and the unit to shed.

use super::{Db, Pid, Process, Tick, UNITS, WEIGHTS};

/// A tick's move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Claim up to this weight.
    Claim(u8),
    /// Shed this unit (the lightest whose loss keeps the process at or above its target).
    Shed(usize),
    Keep,
}

/// The weight of the units process `process` owns by its local view.
pub(super) fn local_weight(process: &Process) -> u8 {
    (0..UNITS)
        .filter(|&u| process.owned[u].is_some())
        .map(|u| WEIGHTS[u])
        .sum()
}

/// `fair::target`: `floor(total / n)`, plus one for the first `total mod n` processes, those above
/// the floor first, then by id.
fn target(total: u8, me: (Pid, u8), others: &[(Pid, u8)]) -> u8 {
    let n = others.len() as u8 + 1;
    let (floor, extra) = (total / n, total % n);
    let rank = |(id, weight): (Pid, u8)| (weight <= floor, id);
    let above = others.iter().filter(|&&o| rank(o) < rank(me)).count() as u8;
    floor + u8::from(above < extra)
}

/// What process `p` (live locally) decides at `now`; `Keep` while its row is not live.
pub(super) fn decide(db: &Db, now: Tick, p: Pid, process: &Process) -> Step {
    if !db.live(now, p) {
        return Step::Keep;
    }
    let shedding = match process.pending {
        Some(super::Op::Shed(u)) => WEIGHTS[u],
        _ => 0,
    };
    let mine = local_weight(process);
    let live_others: Vec<Pid> = (0..db.processes.len() as Pid)
        .filter(|&q| q != p && db.live(now, q))
        .collect();
    let settled = |q: Pid| db.processes[q as usize].is_some_and(|row| row.settled);
    // Counted: settled, or owning units (the weight its row reports, kept true by every claim,
    // shed and release; modelled as the units table's).
    let others: Vec<(Pid, u8)> = live_others
        .iter()
        .map(|&q| (q, db.weight_of(q)))
        .filter(|&(q, weight)| settled(q) || weight > 0)
        .collect();
    let claimable: u8 = (0..UNITS)
        .filter(|&u| match db.units[u].owner {
            None => true,
            Some(q) => db.processes[q as usize].is_some_and(|row| row.expires_at <= now),
        })
        .map(|u| WEIGHTS[u])
        .sum::<u8>()
        + shedding;
    let total = mine + others.iter().map(|o| o.1).sum::<u8>() + claimable;
    let target = target(total, (p, mine), &others);
    let budget = target.saturating_sub(mine).min(claimable);
    let owns = mine > 0 || shedding > 0;
    if budget > 0 {
        let counted = settled(p) || owns;
        // A cold fleet (no other live process owns units) waits until the others settled,
        // unless its warm-up is over already (it claimed before: over for good).
        let cold = !process.warm && !owns && live_others.iter().all(|&q| db.weight_of(q) == 0);
        let waiting = cold && !live_others.iter().all(|&q| settled(q));
        return if counted && !waiting {
            Step::Claim(budget)
        } else {
            Step::Keep
        };
    }
    if mine <= target {
        return Step::Keep;
    }
    // The lightest owned unit whose loss keeps it at or above the target (one per decision).
    let mut held: Vec<usize> = (0..UNITS).filter(|&u| process.owned[u].is_some()).collect();
    held.sort_by_key(|&u| (WEIGHTS[u], u));
    held.into_iter()
        .find(|&u| mine - WEIGHTS[u] >= target)
        .map_or(Step::Keep, Step::Shed)
}
