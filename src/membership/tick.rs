//! One rebalance step ([`Leaser::tick`]): read the facts, decide with [`Facts::decide`], claim or
//! shed, adopt the result, tell the reconciler. The arithmetic lives in `fair.rs`, the local state
//! in `local.rs`; this file only moves data between them and the database.

use std::sync::Arc;
use std::time::Instant;

use super::deliver::Delivery;
use super::fair::{choose_shed, Facts, Held, Member, Step};
use super::holds::{weight_of, Digest, Hold, Holds};
use super::leaser::Leaser;
use super::local::View;
use super::sql::{Batch, Reported, Stats};
use super::unit::Unit;
use crate::error::Result;
use crate::instance::random_u64;
use crate::observe;

/// What one [`Leaser::tick`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rebalance {
    /// Units reported to [`Reconciler::units_lost`](super::Reconciler::units_lost).
    pub lost: Vec<Unit>,
    /// Units reported to [`Reconciler::units_gained`](super::Reconciler::units_gained).
    pub gained: Vec<Unit>,
    /// Units this tick claimed.
    pub claimed: usize,
    /// Units this tick gave back in the database (shed). A unit chosen to shed is reported lost
    /// first and given back right after that delivery, in the same tick.
    pub shed: usize,
    /// Units owned after the tick.
    pub owned: usize,
    /// Weight owned after the tick.
    pub owned_weight: i64,
    /// The fair share of weight this tick aimed at.
    pub fair_share: i64,
    /// Live processes, by the database clock.
    pub live_processes: i64,
    /// Whether this process's own row was live (a process that is not live claims and sheds nothing).
    pub live: bool,
    /// Whether this process is still warming up before its first claim
    /// ([`Config::warm_up`](super::Config::warm_up)): it has not settled yet (it counts in nobody's
    /// fair share until its second heartbeat), or it waits in a cold fleet for the others to
    /// settle; it claimed nothing, whatever its fair share.
    pub warming_up: bool,
}

/// What a live process did this tick, before adopting it.
#[derive(Default)]
struct Moves {
    claimed: Vec<Unit>,
    /// Units chosen to shed, out of the tick's view.
    shed: Holds,
    warming_up: bool,
}

/// What the adoption left: the units lost and gained (queued for the reconciler), whether the
/// process was still live, and what it owns now.
struct Adopted {
    lost: Vec<Unit>,
    gained: Vec<Unit>,
    live_now: bool,
    owned: usize,
    owned_weight: i64,
}

/// Whether the `i`th other live process has settled (shown it stays: see Config::warm_up).
fn others_settled(stats: &Stats, i: usize) -> bool {
    stats.others_settled.get(i).copied().unwrap_or(true)
}

/// The other live processes the fair share counts: those that have settled or own units, never
/// one that may be an incarnation of a crash loop, which would die with what it was given.
fn counted_others(stats: &Stats) -> Vec<Member<'_>> {
    stats
        .others
        .iter()
        .enumerate()
        .filter(|(i, (_, weight))| others_settled(stats, *i) || *weight > 0)
        .map(|(_, (id, weight))| Member {
            id,
            weight: *weight,
        })
        .collect()
}

/// The view a tick starts from, and the local state it was taken at.
struct Start {
    truth: Arc<Holds>,
    weight: i64,
    /// Whether it may differ from the local view (re-read; later also claims and sheds).
    changed: bool,
    generation: u64,
    /// Units being shed that are still this process's in the database.
    shedding: Holds,
    /// Units being shed that a re-read found given back already.
    shed_landed: Vec<Unit>,
}

impl Leaser {
    /// One rebalance step: adopts the units the database says this process owns (replacing the
    /// local view; see below), computes this process's target from the live processes and the claimable weight (see
    /// below), claims up to its deficit in batches, or (only when it claimed nothing) sheds what it
    /// owns above its target, lightest idle units first. Then reports lost units before gained ones
    /// to the [`Reconciler`](super::Reconciler), and calls the hooks. A process that is not live (its row expired by the
    /// database clock, or its local liveness deadline passed) claims and sheds nothing and owns
    /// nothing until a heartbeat makes it live again.
    ///
    /// Targets: with `n` live processes and total weight `W` (enabled units), every process's target
    /// is `floor(W / n)`, and `W mod n` processes get one more: those that own more than the floor
    /// first (they keep what they have), then by process id; every process computes the same targets.
    /// So with unit weights a settled fleet holds floor or ceil of `W / n` per process, and ticks
    /// then write nothing; only units that must move move.
    ///
    /// Adoption: every tick's first statement (read-only, the only one of a steady tick) also reads
    /// a digest of the unit rows that name this process; when it differs from the local view's, or
    /// the process row's change counter moved, the tick re-reads its units. So changes nobody told
    /// this process of, such as an operator's `UPDATE` that hands a unit to another process or sets
    /// it unowned, are adopted at the first tick that starts after they commit (an `UPDATE` still
    /// waiting for a row lock has changed nothing yet): such a unit is reported lost with
    /// [`UnitLoss::Taken`](super::UnitLoss::Taken). A unit whose token changed while its row still
    /// names this process is a new tenure: reported `Taken`, then gained under the new token.
    ///
    /// # Errors
    ///
    /// A database or connection error. Units claimed or shed before it stay as the database says:
    /// the next tick re-reads them, and units whose shed may have landed are reported lost at once.
    pub fn tick(&self) -> Result<Rebalance> {
        let started = Instant::now();
        let decided = {
            let _one_at_a_time = self.one_tick_at_a_time();
            let decided = self.tick_once();
            if decided.is_err() {
                // A claim may have landed without this process knowing: read the truth next time.
                self.local().reread_next_tick();
            }
            decided
        };
        // Deliver and call the hooks outside the tick's lock, so that they may call back into the
        // leaser. Units chosen to shed are reported lost here, before they are given back below:
        // their work has stopped before another process can claim them.
        self.deliver();
        let mut rebalance =
            decided.inspect_err(|_| observe::membership_tick(started.elapsed(), None))?;
        if rebalance.claimed > 0 {
            self.hooks().claimed(rebalance.claimed);
        }
        self.hooks().rebalanced(started.elapsed());
        self.hooks().owned(rebalance.owned, rebalance.owned_weight);
        rebalance.shed = {
            let _one_at_a_time = self.one_tick_at_a_time();
            self.give_back()
                .inspect_err(|_| observe::membership_tick(started.elapsed(), None))?
        };
        if rebalance.shed > 0 {
            self.hooks().shed(rebalance.shed);
        }
        let moved = (rebalance.claimed, rebalance.shed, rebalance.owned);
        observe::membership_tick(started.elapsed(), Some(moved));
        Ok(rebalance)
    }

    /// The tick's decision and adoption, under the tick's lock: read the facts, start from the local
    /// view or the database's, claim or choose what to shed, adopt the result while still live.
    fn tick_once(&self) -> Result<Rebalance> {
        let asked = Instant::now();
        let live_locally = self.local().live_at(asked);
        let stats = self.read_stats()?;
        if self.is_running() {
            // A read that waited out an outage: the other processes may only be late to return.
            self.reached(Some(asked), false);
        }
        let deferring = self.defers().is_some();
        if deferring {
            log::debug!(
                target: "pgtenure::membership",
                "process {}: back from an outage, claiming and shedding nothing for now",
                self.process_id()
            );
        }
        let mut view = self.starting_view(&stats)?;
        let others = counted_others(&stats);
        // This process counts, and may claim, likewise.
        let counted = stats.settled_self || !view.truth.is_empty() || !view.shedding.is_empty();
        let facts = Facts {
            me: Member {
                id: self.process_id(),
                weight: view.weight,
            },
            others: &others,
            // Units being shed are claimable as soon as they are given back.
            claimable: stats.claimable + weight_of(&view.shedding),
        };
        let target = facts.target();
        let moves = if stats.live_self && live_locally && !deferring {
            self.claim_or_shed(&stats, &facts, counted, &mut view)?
        } else {
            Moves::default()
        };
        let claimed = moves.claimed.len();
        let adopted = self.adopt(&stats, view, moves.shed);
        log::debug!(
            target: "pgtenure::membership",
            "process {}: {} live, target {target}, owns {} ({}), claimed {claimed}",
            self.process_id(),
            stats.live,
            adopted.owned,
            adopted.owned_weight,
        );
        Ok(Rebalance {
            lost: adopted.lost,
            gained: adopted.gained,
            claimed,
            shed: 0,
            owned: adopted.owned,
            owned_weight: adopted.owned_weight,
            fair_share: target,
            live_processes: stats.live,
            live: adopted.live_now,
            warming_up: moves.warming_up,
        })
    }

    /// What a live process does this tick: claims up to its budget, or chooses what to shed, or
    /// keeps what it has; a process warming up claims nothing.
    fn claim_or_shed(
        &self,
        stats: &Stats,
        facts: &Facts<'_>,
        counted: bool,
        view: &mut Start,
    ) -> Result<Moves> {
        let mut moves = Moves::default();
        // Owned units whose weight is now 0, to give back (kept while this tick claims).
        let disabled = view.truth.values().any(|h| h.weight <= 0);
        let step = facts.decide(i64::from(self.config().max_claim_per_tick), disabled);
        // Not counted yet: it waits, whatever it would claim.
        moves.warming_up = !counted;
        // The warm-up is consulted only once this process counts: before, it may not even see
        // the processes started with it.
        if let (Step::Claim(_), true) = (step, counted) {
            moves.warming_up = self.warming_up(stats, view);
        }
        match step {
            Step::Claim(_) if moves.warming_up => {
                log::debug!(
                    target: "pgtenure::membership",
                    "process {}: warming up, {} live: no claim until {}",
                    self.process_id(),
                    stats.live,
                    if counted {
                        "the other live processes have settled"
                    } else {
                        "this process has settled (its second heartbeat)"
                    }
                );
            }
            Step::Claim(budget) => {
                moves.claimed = self.claim(&mut view.truth, budget, &view.shedding)?;
            }
            Step::Shed(target) => moves.shed = self.choose_shed(&mut view.truth, target),
            Step::Keep => {}
        }
        if !moves.claimed.is_empty() || !moves.shed.is_empty() {
            view.changed = true;
            view.weight = weight_of(&view.truth);
        }
        Ok(moves)
    }

    /// Whether a process that counts and would claim still waits (see
    /// [`Config::warm_up`](super::Config::warm_up)).
    fn warming_up(&self, stats: &Stats, view: &Start) -> bool {
        let mut warm_up = self.warm_up();
        // Only a cold fleet waits for the others: a process that owns units already, or
        // that joins a fleet whose live processes own some (they shed its share to it
        // once it counts), claims as soon as it counts itself.
        let warm = stats.others.iter().any(|(_, weight)| *weight > 0);
        if warm || !view.truth.is_empty() || !view.shedding.is_empty() {
            warm_up.end();
        }
        let others = (stats.others.iter().enumerate())
            .map(|(i, (id, _))| (id.as_str(), others_settled(stats, i)));
        !warm_up.may_claim(others, Instant::now())
    }

    /// Adopts the database's truth only while live, judged now (the tick may have waited on the
    /// database), and only if nothing forgot the ownership meanwhile (the liveness watcher, a
    /// lapsed heartbeat); queues what changed while still holding the state, so deliveries keep
    /// decision order.
    fn adopt(&self, stats: &Stats, view: Start, shed: Holds) -> Adopted {
        let mut local = self.local();
        let live_now = stats.live_self
            && local.live_at(Instant::now())
            && local.unchanged_since(view.generation);
        let shed_now: Vec<Unit> = shed.keys().cloned().collect();
        let adopted = View {
            truth: view.truth,
            weight: view.weight,
            changed: view.changed,
            shed,
            shed_landed: view.shed_landed,
            changes: stats.changes,
        };
        let (losses, gained) = local.adopt(adopted, live_now);
        let lost = losses.units();
        let told = self.outbox().push_losses(losses);
        self.outbox().push(Delivery::Gained(gained.clone()));
        if live_now {
            local.told_lost_in(shed_now, told);
        }
        Adopted {
            lost,
            gained,
            live_now,
            owned: local.owned_count(),
            owned_weight: local.owned_weight(),
        }
    }

    /// What a tick decides from, in one statement that never scans units.
    fn read_stats(&self) -> Result<Stats> {
        self.sql().stats(self.db(), self.process_id())
    }

    /// The view a tick starts from: the local one while it is known to match the database (the
    /// process row's change counter has not moved since, and the rows naming this process have the
    /// local view's digest), else the database's truth, re-read (first tick, a lapse, a failed
    /// tick, or another process or an operator changed its units, through pgtenure or not).
    fn starting_view(&self, stats: &Stats) -> Result<Start> {
        let digest = Digest {
            units: stats.owned_units,
            marks: stats.owned_marks,
        };
        let known = self.local().known(stats.changes, digest);
        if known.drifted {
            log::info!(
                target: "pgtenure::membership",
                "process {}: its units changed in the database behind its back; re-reading them",
                self.process_id()
            );
        }
        let (truth, weight, changed, shedding, shed_landed) = match known.current {
            Some((owned, weight)) => (owned, weight, false, known.shedding, Vec::new()),
            None => {
                let mut read: Holds = self
                    .sql()
                    .owned(self.db(), self.process_id())?
                    .into_iter()
                    .map(Hold::of)
                    .collect();
                // Units being shed are still this process's in the database, but no longer its
                // work; those the database no longer gives it were given back already.
                let (pending, landed): (Holds, Holds) = known
                    .shedding
                    .into_iter()
                    .partition(|(unit, _)| read.remove(unit).is_some());
                let weight = weight_of(&read);
                (
                    Arc::new(read),
                    weight,
                    true,
                    pending,
                    landed.into_keys().collect(),
                )
            }
        };
        Ok(Start {
            truth,
            weight,
            changed,
            generation: known.generation,
            shedding,
            shed_landed,
        })
    }

    /// Claims up to `budget` weight, in batches of at most `claim_batch` units. A batch that fails
    /// ends the tick with its error; the next tick re-reads what the database says is owned (a
    /// batch whose answer was lost may have claimed units).
    fn claim(
        &self,
        truth: &mut Arc<Holds>,
        mut budget: i64,
        shedding: &Holds,
    ) -> Result<Vec<Unit>> {
        // What the process row reports: owned and still being shed.
        let mut weight = weight_of(truth) + weight_of(shedding);
        let mut claimed = Vec::new();
        while budget > 0 {
            let limit =
                i32::try_from(budget.min(i64::from(self.config().claim_batch))).unwrap_or(i32::MAX);
            let slot = (random_u64() % (i32::MAX as u64)) as i32;
            let count = (truth.len() + shedding.len()) as i32;
            let reported = Reported { count, weight };
            // In the run loop, a claim waits for a connection one heartbeat interval at most.
            let until =
                (self.is_running()).then(|| Instant::now() + self.config().heartbeat_interval);
            let rows = self.sql().claim(
                self.db(),
                self.process_id(),
                limit,
                budget,
                slot,
                reported,
                until,
            )?;
            if rows.is_empty() {
                break;
            }
            for (unit, hold) in rows.into_iter().map(Hold::of) {
                budget -= i64::from(hold.weight);
                weight += i64::from(hold.weight.max(0));
                Arc::make_mut(truth).insert(unit.clone(), hold);
                claimed.push(unit);
            }
        }
        Ok(claimed)
    }

    /// Chooses what to shed down to `target` (see [`choose_shed`]; disabled units always) and takes
    /// it out of this tick's view: the adoption reports it lost, and [`Leaser::give_back`] sheds it
    /// in the database once that was delivered.
    fn choose_shed(&self, truth: &mut Arc<Holds>, target: i64) -> Holds {
        let held: Vec<Held> = truth
            .iter()
            .map(|(unit, hold)| Held {
                unit: unit.clone(),
                weight: hold.weight,
                in_flight: self.reconciler().in_flight(unit),
            })
            .collect();
        let choice = choose_shed(&held, target);
        if choice.is_empty() {
            return Holds::new();
        }
        let map = Arc::make_mut(truth);
        choice
            .into_iter()
            .filter_map(|unit| map.remove(&unit).map(|w| (unit, w)))
            .collect()
    }

    /// Gives back, owner-guarded and only while live, the units chosen to shed (already reported
    /// lost); returns how many the database gave back. A failure keeps them to give back at the next
    /// tick (they stay this process's in the database meanwhile, and nobody works on them).
    fn give_back(&self) -> Result<usize> {
        let (shedding, reported) = {
            let local = self.local();
            // The shed statement reports what remains: it is given what the row counts now.
            (
                local.to_give_back(|message| self.outbox().told(message)),
                local.reported(),
            )
        };
        if shedding.is_empty() {
            return Ok(0);
        }
        let units = Batch::of(shedding.keys());
        let result = self
            .sql()
            .shed(self.db(), self.process_id(), &units, reported);
        let given: Vec<Unit> = match result {
            Ok(given) => given,
            Err(e) => {
                self.local().reread_next_tick();
                return Err(e);
            }
        };
        self.local().gave_back(&given, shedding.len());
        let given = given.len();
        log::debug!(
            target: "pgtenure::membership",
            "process {} gave back {given} of {} units chosen to shed",
            self.process_id(),
            shedding.len()
        );
        Ok(given)
    }
}
