//! A reconciler that records which process works on which unit, and counts any unit that a process
//! gains while another still works on it: the membership "never two workers" check.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss};

#[derive(Default)]
pub struct Registry {
    pub active: Mutex<BTreeMap<Unit, usize>>,
    /// Processes that crashed: they work on nothing, and hear nothing, from then on.
    pub down: Mutex<BTreeSet<usize>>,
    /// Each process's leaser, to ask whether it still owns a unit by its own clock.
    pub leasers: Mutex<BTreeMap<usize, Weak<Leaser>>>,
    pub violations: AtomicUsize,
    pub gained: AtomicUsize,
    /// Units an operator's `UPDATE` is taking from a process (unit -> that process): the new owner
    /// may be told it gained one before the old owner's next tick tells it the unit was taken (the
    /// `UPDATE` does not wait for it), so that overlap is counted in `handed_over`, not as a
    /// violation. The operator checks that the old owner stopped by the end of its first tick
    /// that started after the change committed.
    pub in_transit: Mutex<BTreeMap<Unit, usize>>,
    /// Units gained while their old owner, from whom an operator moved them, still worked on them.
    pub handed_over: AtomicUsize,
    /// Gains told to a reconciler after its leaser had lost the unit again (the loss is told
    /// next): deliveries are in decision order but later than the decisions, and a slow reconciler
    /// can hear of a gain after its leaser no longer owns the unit, while the unit's next owner
    /// works on it. The process never worked on the unit beside the other by its leaser's account
    /// (`Leaser::owned`, which the application goes by), so this is no violation.
    pub stale_gains: AtomicUsize,
}

impl Registry {
    /// A crashed process works on nothing any more, at once (call it before stopping its loop: a
    /// crash does not wait for the loop to notice).
    pub fn crashed(&self, id: usize) {
        let mut active = self.active.lock();
        self.down.lock().insert(id);
        active.retain(|_, owner| *owner != id);
    }

    /// Lets the registry ask process `id`'s leaser what it owns.
    pub fn watch(&self, id: usize, leaser: &Arc<Leaser>) {
        self.leasers.lock().insert(id, Arc::downgrade(leaser));
    }

    /// Whether process `id` still works on `unit`: told so, and its leaser still owns it by its own
    /// clock. An application works on a unit only while `Leaser::owned` (or `live_until`) says so,
    /// as a lease holder writes only while `Lease::is_held`: the callback at the local deadline can
    /// come late when the process is starved of CPU, the clock cannot.
    fn still_works(&self, id: usize, unit: &Unit) -> bool {
        match self.leasers.lock().get(&id).and_then(Weak::upgrade) {
            Some(leaser) => leaser.owned().contains(unit),
            None => true,
        }
    }

    /// What each side believed of `unit` when `new` gained it while `old` still worked on it: the
    /// diagnosis a violation is printed with (each leaser's token of the unit and how long its
    /// local belief had left, and an operator's move of the unit under way, if any).
    fn overlap(&self, old: usize, new: usize, unit: &Unit) -> String {
        let leasers = self.leasers.lock();
        let view = |id: usize| match leasers.get(&id).and_then(Weak::upgrade) {
            Some(leaser) => format!(
                "process {id}: token {:?}, local belief left {:?}",
                leaser.token(unit),
                leaser
                    .live_until()
                    .map(|until| until.saturating_duration_since(std::time::Instant::now()))
            ),
            None => format!("process {id}: gone"),
        };
        format!(
            "{}; {}; operator moving it from: {:?}",
            view(old),
            view(new),
            self.in_transit.lock().get(unit)
        )
    }

    pub fn violations(&self) -> usize {
        self.violations.load(Ordering::SeqCst)
    }
}

/// Process `id`'s reconciler. With `drain_ms` above zero it is slow, as real work is: after noting
/// a change it takes up to that many milliseconds (at random) to start or drain the work.
pub struct Worker {
    pub registry: Arc<Registry>,
    pub id: usize,
    pub drain_ms: u64,
}

impl Worker {
    fn drain(&self) {
        if self.drain_ms > 0 {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos() as u64;
            // Real time is the subject: a reconciler that takes a while to start or drain work.
            std::thread::sleep(std::time::Duration::from_millis(nanos % self.drain_ms));
        }
    }
}

impl Reconciler for Worker {
    fn units_gained(&self, units: &[Unit]) {
        let mut active = self.registry.active.lock();
        if self.registry.down.lock().contains(&self.id) {
            return;
        }
        for unit in units {
            if let Some(other) = active.insert(unit.clone(), self.id) {
                if other != self.id && self.registry.still_works(other, unit) {
                    // An operator moving the unit from either of the two: its `UPDATE` does not
                    // wait for the old owner's next tick.
                    let moving = self.registry.in_transit.lock().get(unit).copied();
                    if moving == Some(other) || moving == Some(self.id) {
                        self.registry.handed_over.fetch_add(1, Ordering::SeqCst);
                    } else if !self.registry.still_works(self.id, unit) {
                        self.registry.stale_gains.fetch_add(1, Ordering::SeqCst);
                        eprintln!(
                            "{unit} gained by {}, told after its leaser lost it again, while {other} works on it ({})",
                            self.id,
                            self.registry.overlap(other, self.id, unit)
                        );
                    } else {
                        self.registry.violations.fetch_add(1, Ordering::SeqCst);
                        eprintln!(
                            "{unit} gained by {} while {other} works on it ({})",
                            self.id,
                            self.registry.overlap(other, self.id, unit)
                        );
                    }
                }
            }
        }
        drop(active);
        self.registry
            .gained
            .fetch_add(units.len(), Ordering::SeqCst);
        self.drain();
    }

    fn units_lost(&self, units: &[Unit], _reason: UnitLoss) {
        let mut active = self.registry.active.lock();
        let mut in_transit = self.registry.in_transit.lock();
        for unit in units {
            if active.get(unit) == Some(&self.id) {
                active.remove(unit);
            }
            if in_transit.get(unit) == Some(&self.id) {
                in_transit.remove(unit);
            }
        }
        drop(in_transit);
        drop(active);
        self.drain();
    }
}

/// The units an application works on after hearing `told` in order (`true`: gained, `false`: lost).
pub fn working<'a>(told: impl IntoIterator<Item = &'a (bool, Vec<Unit>)>) -> BTreeSet<Unit> {
    let mut set = BTreeSet::new();
    for (gained, units) in told {
        for unit in units {
            if *gained {
                set.insert(unit.clone());
            } else {
                set.remove(unit);
            }
        }
    }
    set
}
