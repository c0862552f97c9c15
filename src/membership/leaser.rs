//! The leaser: heartbeats, rebalance steps (ticks), sweeps, release.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use postgres::Row;

use super::config::{Config, Hooks};
use super::deliver::{Delivery, Outbox};
use super::fair::{choose_shed, Facts, Held, Member, Step};
use super::local::{stop_after, Local, View};
use super::sql::Statements;
use super::unit::{Reconciler, Unit};
use crate::db::{Db, Policy};
use crate::error::Result;
use crate::input::{micros, MIN_DURATION};
use crate::instance::random_u64;
use crate::table_name::TableName;

/// What one [`Leaser::tick`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rebalance {
    /// Units reported to [`Reconciler::units_lost`].
    pub lost: Vec<Unit>,
    /// Units reported to [`Reconciler::units_gained`].
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
}

/// How many process rows and units a [`Leaser::sweep`] removed and freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sweep {
    /// Process rows deleted.
    pub processes: u64,
    /// Units freed.
    pub units: u64,
}

/// A process's membership: its heartbeat row and the units it owns; see the [module docs](super).
///
/// `Send` and `Sync`: share it in an `Arc` between the thread that calls [`Leaser::run`] and the
/// rest of the application. Ticks are serialized.
pub struct Leaser {
    pub(super) db: Db,
    pub(super) reconciler: Arc<dyn Reconciler>,
    pub(super) config: Config,
    pub(super) hooks: Arc<dyn Hooks>,
    pub(super) process_id: String,
    pub(super) ttl_us: i64,
    pub(super) cutoff_us: i64,
    pub(super) sql: Arc<Statements>,
    pub(super) local: Mutex<Local>,
    pub(super) ticking: Mutex<()>,
    /// While `run` runs: wakes its liveness watcher when the local deadline moves.
    pub(super) watch: Mutex<Option<Sender<()>>>,
    /// The one place the reconciler is told anything, in decision order.
    pub(super) outbox: Outbox,
}

impl Leaser {
    /// A leaser for one process, on the default tables; `hooks` observes its ticks ([`NoHooks`](super::NoHooks)
    /// for none).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the configuration is invalid:
    /// a zero duration or claim size, a heartbeat interval not below four fifths of the TTL, a sweep
    /// cutoff not above it, a negative or non-finite hysteresis, a process id that is not a UUID, a
    /// blank or NUL-carrying hostname or version.
    pub fn new(
        db: &Db,
        reconciler: Arc<dyn Reconciler>,
        config: Config,
        hooks: Arc<dyn Hooks>,
    ) -> Result<Leaser> {
        let config = config.validated()?;
        let process_id = config.process_id.clone().expect("validated");
        Ok(Leaser {
            db: db.clone(),
            reconciler,
            ttl_us: micros("membership ttl", config.ttl, MIN_DURATION)?,
            cutoff_us: micros("sweep cutoff", config.sweep_cutoff, MIN_DURATION)?,
            config,
            hooks,
            process_id,
            sql: Statements::default_tables(),
            local: Mutex::new(Local::default()),
            ticking: Mutex::new(()),
            watch: Mutex::new(None),
            outbox: Outbox::default(),
        })
    }

    /// Uses other tables (each `table` or `schema.table`), the same as the fleet's [`Units`](super::Units).
    /// Defaults to `pgtenure_processes` and `pgtenure_units`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a name is not a plain
    /// identifier, or the two tables (or the units table's derived index names) collide.
    pub fn with_tables(mut self, processes: &str, units: &str) -> Result<Leaser> {
        self.sql = Statements::new(TableName::parse(processes)?, TableName::parse(units)?)?;
        Ok(self)
    }

    /// This process's id (UUID text).
    pub fn process_id(&self) -> &str {
        &self.process_id
    }

    /// The configuration in force (defaults filled in).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The units this process owns, as of its last tick; empty once its local liveness deadline (the
    /// instant before the last successful heartbeat, plus the TTL) has passed, since from then on
    /// another process may own them.
    pub fn owned(&self) -> Vec<Unit> {
        let local = self.local.lock();
        if !local.live_at(Instant::now()) {
            return Vec::new();
        }
        local.owned.keys().cloned().collect()
    }

    /// The local liveness deadline, if a heartbeat has succeeded: the instant before it was sent,
    /// plus four fifths of the TTL. A fifth of the TTL before the database's expiry of the process
    /// row, so the reconciler hears of the loss before another process may claim the units, even
    /// while it is still busy with an earlier callback (keep callbacks shorter than that).
    pub fn live_until(&self) -> Option<Instant> {
        self.local.lock().live_until
    }

    /// True once a tick has succeeded.
    pub fn ready(&self) -> bool {
        self.local.lock().ready
    }

    /// Upserts the process row with `now() + ttl` and the owned count and weight: the only
    /// steady-state write of a process, and moves the local liveness deadline. If the row had expired
    /// since the previous heartbeat (by the database clock, or more than a TTL passed locally), other
    /// processes may have claimed its units: every owned unit is reported lost and forgotten, and the
    /// next tick (at once, in `run`) re-reads what the database says it still owns.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn heartbeat(&self) -> Result<()> {
        let (count, weight, previous) = {
            let local = self.local.lock();
            let (count, weight) = local.reported();
            (count, weight, local.last_beat)
        };
        let sent = Instant::now();
        let row = self.db.query_one(
            "heartbeat",
            Policy::ONCE,
            &self.sql.heartbeat,
            &[
                &self.process_id.as_str(),
                &self.ttl_us,
                &count,
                &weight,
                &self.config.hostname.as_str(),
                &self.config.version.as_str(),
            ],
        )?;
        let lapsed: bool = row.get("lapsed");
        let stop = stop_after(self.config.ttl);
        let late = previous.is_some_and(|p| sent.duration_since(p) > stop);
        {
            let mut local = self.local.lock();
            local.last_beat = Some(sent);
            local.live_until = Some(sent + stop);
            if lapsed || late {
                local.reread = true;
                let lost = local.forget_all();
                self.outbox.push(Delivery::Lost(lost));
            }
        }
        if lapsed || late {
            log::warn!(
                target: "pgtenure::membership",
                "process {} heartbeat came after its row expired; its units may be elsewhere now",
                self.process_id
            );
        }
        self.outbox.flush(&*self.reconciler);
        if let Some(watch) = self.watch.lock().as_ref() {
            // A full channel already holds a wake-up; the watcher re-reads the deadline anyway.
            let _ = watch.try_send(());
        }
        Ok(())
    }

    /// Past the local liveness deadline without a new heartbeat: report every owned unit lost.
    pub(super) fn expire_if_due(&self) {
        {
            let mut local = self.local.lock();
            if local.live_at(Instant::now()) {
                return;
            }
            let lost = local.forget_all();
            if !lost.is_empty() {
                log::warn!(
                    target: "pgtenure::membership",
                    "process {} missed its heartbeats past its TTL: stopping work on {} units",
                    self.process_id,
                    lost.len()
                );
            }
            self.outbox.push(Delivery::Lost(lost));
        }
        self.outbox.flush(&*self.reconciler);
    }

    /// One rebalance step: reads the units the database says this process owns (replacing the local
    /// view), computes this process's target from the live processes and the claimable weight (see
    /// below), claims up to its deficit in batches, or (only when it claimed nothing) sheds what it
    /// owns above its target, lightest idle units first. Then reports lost units before gained ones
    /// to the [`Reconciler`], and calls the hooks. A process that is not live (its row expired by the
    /// database clock, or its local liveness deadline passed) claims and sheds nothing and owns
    /// nothing until a heartbeat makes it live again.
    ///
    /// Targets: with `n` live processes and total weight `W` (enabled units), every process's target
    /// is `floor(W / n)`, and `W mod n` processes get one more: those that own more than the floor
    /// first (they keep what they have), then by process id; every process computes the same targets. So with unit weights a settled fleet
    /// holds floor or ceil of `W / n` per process, and ticks then write nothing; only units that
    /// must move move.
    ///
    /// # Errors
    ///
    /// A database or connection error. Units claimed or shed before it stay as the database says:
    /// the next tick re-reads them, and units whose shed may have landed are reported lost at once.
    pub fn tick(&self) -> Result<Rebalance> {
        let decided = {
            let _one_at_a_time = self.ticking.lock();
            let decided = self.tick_once();
            if decided.is_err() {
                // A claim may have landed without this process knowing: read the truth next time.
                self.local.lock().reread = true;
            }
            decided
        };
        // Deliver outside the tick's lock, so a reconciler may call back into the leaser. Units
        // chosen to shed are reported lost here, before they are given back below: their work has
        // stopped before another process can claim them.
        self.outbox.flush(&*self.reconciler);
        let mut rebalance = decided?;
        let _one_at_a_time = self.ticking.lock();
        rebalance.shed = self.give_back()?;
        Ok(rebalance)
    }

    fn tick_once(&self) -> Result<Rebalance> {
        let started = Instant::now();
        let id = self.process_id.as_str();
        let live_locally = self.local.lock().live_at(Instant::now());
        let stats = self.db.query_one(
            "read membership stats",
            Policy::IDEMPOTENT,
            &self.sql.stats,
            &[&id],
        )?;
        // The database's truth about what this process owns: re-read only when it may differ from
        // the local view (first tick, a lapse, a failed tick, or another process or an operator
        // changed its units).
        let changes: Option<i64> = stats.get("changes");
        let (known, generation, shedding) = {
            let local = self.local.lock();
            let current = local.ready && !local.reread && local.seen_changes == changes;
            (
                current.then(|| (local.owned.clone(), local.owned_weight)),
                local.generation,
                local.shedding.clone(),
            )
        };
        // `changed`: whether this tick's view may differ from the local one (re-read, claims, sheds).
        let (mut truth, mut owned_weight, mut changed) = match known {
            Some((owned, weight)) => (owned, weight, false),
            None => {
                // Units being shed are still this process's in the database, but no longer its work.
                let read: BTreeMap<Unit, i32> = self
                    .db
                    .query(
                        "read owned units",
                        Policy::IDEMPOTENT,
                        &self.sql.owned,
                        &[&id],
                    )?
                    .iter()
                    .map(unit_row)
                    .filter(|(unit, _)| !shedding.contains_key(unit))
                    .collect();
                let weight = weight_of(&read);
                (Arc::new(read), weight, true)
            }
        };
        let live: i64 = stats.get("live");
        let live_self: bool = stats.get("live_self");
        let others_ids: Vec<String> = stats.get("others");
        let others_weights: Vec<i64> = stats.get("others_weights");
        let others: Vec<Member<'_>> = others_ids
            .iter()
            .zip(&others_weights)
            .map(|(id, weight)| Member {
                id,
                weight: *weight,
            })
            .collect();
        let unowned: i64 = stats.get("unowned_weight");
        let orphaned: i64 = stats.get("orphaned_weight");
        let facts = Facts {
            me: Member {
                id,
                weight: owned_weight,
            },
            others: &others,
            // Units being shed are claimable as soon as they are given back.
            claimable: unowned + orphaned + weight_of(&shedding),
        };
        let target = facts.target();

        let mut claimed = Vec::new();
        let mut shed: BTreeMap<Unit, i32> = BTreeMap::new();
        if live_self && live_locally {
            // Disabled units only appear with a re-read (a weight change moves the counter).
            let disabled = changed && truth.values().any(|w| *w <= 0);
            match facts.decide(i64::from(self.config.max_claim_per_tick), disabled) {
                Step::Claim(budget) => {
                    claimed = self.claim(&mut truth, budget, &shedding)?;
                }
                Step::Shed(target) => shed = self.choose_shed(&mut truth, target),
                Step::Keep => {}
            }
            if !claimed.is_empty() || !shed.is_empty() {
                changed = true;
                owned_weight = weight_of(&truth);
            }
        }

        // Adopt the database's truth only while live, judged now (the tick may have waited on the
        // database), and only if nothing forgot the ownership meanwhile (the liveness watcher, a
        // lapsed heartbeat); queue what changed while still holding the state, so deliveries keep
        // decision order.
        let (lost, gained, live_now, owned, owned_weight) = {
            let mut local = self.local.lock();
            let live_now =
                live_self && local.live_at(Instant::now()) && local.generation == generation;
            let view = View {
                truth,
                weight: owned_weight,
                changed,
                shed,
                changes,
            };
            let (lost, gained) = local.adopt(view, live_now);
            self.outbox.push(Delivery::Lost(lost.clone()));
            self.outbox.push(Delivery::Gained(gained.clone()));
            (
                lost,
                gained,
                live_now,
                local.owned.len(),
                local.owned_weight,
            )
        };
        self.outbox.flush(&*self.reconciler);
        if !claimed.is_empty() {
            self.hooks.claimed(claimed.len());
        }
        self.hooks.rebalanced(started.elapsed());
        self.hooks.owned(owned, owned_weight);
        log::debug!(
            target: "pgtenure::membership",
            "process {}: {live} live, target {target}, owns {owned} ({owned_weight}), claimed {}",
            self.process_id,
            claimed.len()
        );
        Ok(Rebalance {
            lost,
            gained,
            claimed: claimed.len(),
            shed: 0,
            owned,
            owned_weight,
            fair_share: target,
            live_processes: live,
            live: live_now,
        })
    }

    /// Claims up to `budget` weight, in batches of at most `claim_batch` units. A batch that fails
    /// ends the tick with its error; the next tick re-reads what the database says is owned (a
    /// batch whose answer was lost may have claimed units).
    fn claim(
        &self,
        truth: &mut Arc<BTreeMap<Unit, i32>>,
        mut budget: i64,
        shedding: &BTreeMap<Unit, i32>,
    ) -> Result<Vec<Unit>> {
        // What the process row reports: owned and still being shed.
        let mut weight = weight_of(truth) + weight_of(shedding);
        let mut claimed = Vec::new();
        while budget > 0 {
            let limit =
                i32::try_from(budget.min(i64::from(self.config.claim_batch))).unwrap_or(i32::MAX);
            let slot = (random_u64() % (i32::MAX as u64)) as i32;
            let count = (truth.len() + shedding.len()) as i32;
            let rows = self.db.query(
                "claim units",
                Policy::ONCE,
                &self.sql.claim,
                &[
                    &self.process_id.as_str(),
                    &limit,
                    &budget,
                    &slot,
                    &count,
                    &weight,
                ],
            )?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let (unit, w) = unit_row(row);
                budget -= i64::from(w);
                weight += i64::from(w.max(0));
                Arc::make_mut(truth).insert(unit.clone(), w);
                claimed.push(unit);
            }
        }
        Ok(claimed)
    }

    /// Chooses what to shed down to `target` (see [`choose_shed`]; disabled units always) and takes
    /// it out of this tick's view: the adoption reports it lost, and [`Leaser::give_back`] sheds it
    /// in the database once that was delivered.
    fn choose_shed(
        &self,
        truth: &mut Arc<BTreeMap<Unit, i32>>,
        target: i64,
    ) -> BTreeMap<Unit, i32> {
        let held: Vec<Held> = truth
            .iter()
            .map(|(unit, weight)| Held {
                unit: unit.clone(),
                weight: *weight,
                in_flight: self.reconciler.in_flight(unit),
            })
            .collect();
        let choice = choose_shed(&held, target);
        if choice.is_empty() {
            return BTreeMap::new();
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
        let (shedding, count, weight) = {
            let local = self.local.lock();
            if local.shedding.is_empty() {
                return Ok(0);
            }
            // The shed statement reports what remains: it is given what the row counts now.
            let (count, weight) = local.reported();
            (local.shedding.clone(), count, weight)
        };
        let tenants: Vec<&str> = shedding.keys().map(|u| u.tenant.as_str()).collect();
        let shards: Vec<i32> = shedding.keys().map(|u| u.shard).collect();
        let result = self.db.query(
            "shed units",
            Policy::IDEMPOTENT,
            &self.sql.shed,
            &[
                &self.process_id.as_str(),
                &tenants,
                &shards,
                &count,
                &weight,
            ],
        );
        let given = match result {
            Ok(rows) => rows.len(),
            Err(e) => {
                self.local.lock().reread = true;
                return Err(e);
            }
        };
        {
            let mut local = self.local.lock();
            for unit in shedding.keys() {
                local.shedding.remove(unit);
            }
        }
        if given > 0 {
            self.hooks.shed(given);
        }
        log::debug!(
            target: "pgtenure::membership",
            "process {} gave back {given} of {} units chosen to shed",
            self.process_id,
            shedding.len()
        );
        Ok(given)
    }

    /// Deletes process rows expired for longer than the sweep cutoff and frees their units, in one
    /// statement.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn sweep(&self) -> Result<Sweep> {
        let row = self.db.query_one(
            "sweep processes",
            Policy::ONCE,
            &self.sql.sweep,
            &[&self.cutoff_us],
        )?;
        let sweep = Sweep {
            processes: u64::try_from(row.get::<_, i64>("processes")).unwrap_or_default(),
            units: u64::try_from(row.get::<_, i64>("units")).unwrap_or_default(),
        };
        if sweep.processes > 0 {
            log::info!(
                target: "pgtenure::membership",
                "swept {} expired processes and freed {} units",
                sweep.processes,
                sweep.units
            );
        }
        Ok(sweep)
    }

    /// Gives every owned unit back in one statement and forgets them locally (the reconciler is not
    /// called: drain your work, then call [`Leaser::delete_process`]). Returns the units released.
    ///
    /// # Errors
    ///
    /// A database or connection error; the units then become claimable when the row expires.
    pub fn release(&self) -> Result<Vec<Unit>> {
        let _one_at_a_time = self.ticking.lock();
        let rows = self.db.query(
            "release units",
            Policy::ONCE,
            &self.sql.release,
            &[&self.process_id.as_str()],
        )?;
        let mut local = self.local.lock();
        local.owned = Arc::default();
        local.owned_weight = 0;
        local.shedding.clear();
        drop(local);
        Ok(rows
            .iter()
            .map(|row| Unit {
                tenant: row.get("tenant"),
                shard: row.get("shard"),
            })
            .collect())
    }

    /// Removes the process row (the last step of a graceful shutdown), freeing any unit it still
    /// owns, so live-process counts drop at once.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn delete_process(&self) -> Result<()> {
        let _one_at_a_time = self.ticking.lock();
        self.db.query_one(
            "delete process",
            Policy::ONCE,
            &self.sql.delete_process,
            &[&self.process_id.as_str()],
        )?;
        let mut local = self.local.lock();
        local.forget_all();
        local.last_beat = None;
        local.live_until = None;
        Ok(())
    }
}

impl fmt::Debug for Leaser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let local = self.local.lock();
        f.debug_struct("Leaser")
            .field("process_id", &self.process_id)
            .field("processes", &self.sql.processes)
            .field("units", &self.sql.units)
            .field("owned", &local.owned.len())
            .field("ready", &local.ready)
            .field("config", &self.config)
            .finish()
    }
}

pub(super) fn unit_row(row: &Row) -> (Unit, i32) {
    (
        Unit {
            tenant: row.get("tenant"),
            shard: row.get("shard"),
        },
        row.get("weight"),
    )
}

pub(super) fn weight_of(units: &BTreeMap<Unit, i32>) -> i64 {
    units.values().map(|w| i64::from((*w).max(0))).sum()
}
