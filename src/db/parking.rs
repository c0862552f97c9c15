//! Each thread's last connection, kept for that thread between its statements.
//!
//! Handing every statement whichever connection went back to the pool last moves a connection,
//! with its buffers, its runtime and its socket's state, from thread to thread at every call: with
//! eight threads on two cores that cost a fifth of the calls per second a connection of each
//! thread's own reaches (docs/performance.md, "at once"). So, with
//! [`DbBuilder::thread_affinity`](crate::DbBuilder::thread_affinity) on (the default; it never
//! applies to a pool of the application's own), a connection that served one of
//! pgtenure's own statements is not given back to the r2d2 pool but parked in a slot, and the
//! thread that parked it takes it from there next time without touching the pool.
//!
//! A parked connection stays available to every other thread, and the pool's limits hold:
//! - a checkout takes, in this order, the thread's own parked connection, an idle one from the
//!   pool, any parked one, and only then waits in the pool;
//! - a thread about to wait first counts itself in the pool's [`Waiters`], then looks at the
//!   slots again; a thread parking looks at the waiters after parking and, if anyone waits, takes
//!   a parked connection back out and gives it to the pool, which wakes a waiter. Both sides separate their
//!   write from their read with a sequentially consistent fence, so at least one of them sees the
//!   other: no connection stays parked while a thread waits for one;
//! - parked connections are still checked out of r2d2, which so never opens more than its
//!   `max_size`; reading the pool's state ([`Parking::drain`]) first gives them all back, so its
//!   count of idle connections stays true.
//!
//! A parked connection goes back to the pool, where r2d2's idle timeout and maximum lifetime apply
//! to it again, as soon as nobody is likely to take it from its slot:
//! - when the thread that parked it exits (a thread per request, a renewal thread that ends): a
//!   destructor of the thread's own, [`ParkedBy`], has the pool's worker threads give back what it
//!   left parked;
//! - when it lay parked unused through two sweeps ([`Parking::sweep`], every [`SWEEP_EVERY`] on
//!   the pool's own worker threads): a thread that calls now and then, a renewal thread between its
//!   renewals, holds no connection between its calls for longer than that.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use postgres::Client;
use scheduled_thread_pool::{JobHandle, ScheduledThreadPool};

use crate::statement::Cache;

/// A pooled client of some manager, with its statement cache: what is parked.
pub(crate) trait Pooled: Send {
    fn client(&self) -> &Client;
    fn client_mut(&mut self) -> &mut Client;
    fn client_and_cache(&mut self) -> (&mut Client, &mut Cache);
}

/// A parked connection, the thread that parked it, and whether a sweep has seen it parked.
struct Parked {
    thread: usize,
    conn: Box<dyn Pooled>,
    swept: bool,
}

/// One parked connection's place, alone on its cache lines: each thread locks its own slot twice
/// per statement, and slots sharing a line would move it between the cores at each of those.
#[repr(align(128))]
struct Slot(Mutex<Option<Parked>>);

impl std::ops::Deref for Slot {
    type Target = Mutex<Option<Parked>>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The slots of one pool's parked connections (one per connection the pool may open).
pub(crate) struct Parking {
    slots: Box<[Slot]>,
    /// Threads waiting in the pool for a connection (the pool's count, shared).
    waiters: Arc<Waiters>,
    /// The pool's worker threads: they sweep, and give back what exited threads left parked.
    workers: Arc<ScheduledThreadPool>,
    /// The sweep's job on the pool's worker threads, cancelled when the parking goes.
    sweeper: Mutex<Option<JobHandle>>,
}

/// The most connections parked at once: a checkout that finds none of its own looks at every slot,
/// so their number is bounded (the connections of a larger pool beyond these go back to it).
const MAX_SLOTS: u32 = 64;

/// How often parked connections are swept: one unused through two sweeps, between one and two of
/// these, goes back to the pool.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Numbers the threads that park.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number, its last slot, and the parkings it parked connections in (one
    /// thread-local: a statement reads it twice).
    static ME: ParkedBy = {
        let thread = NEXT_THREAD.fetch_add(1, SeqCst);
        ParkedBy {
            thread,
            last: Cell::new(thread),
            remembered: Cell::new(std::ptr::null()),
            parkings: RefCell::new(Vec::new()),
        }
    };
}

/// A thread's number and the parkings it parked connections in: when the thread exits, its
/// destructor gives back to their pools the connections it left parked, which no thread would
/// take as its own any more.
struct ParkedBy {
    thread: usize,
    /// The slot this thread parked its last connection in (of any pool: for a thread using
    /// several, a hint that may miss); at first its number, which spreads the threads' slots.
    last: Cell<usize>,
    /// The parking this thread remembered last (compared, never dereferenced): parking there
    /// again needs no look at `parkings`. Its allocation cannot be reused by another parking
    /// meanwhile: a `Weak` of it stays in `parkings` until another parking is remembered.
    remembered: Cell<*const Parking>,
    parkings: RefCell<Vec<Weak<Parking>>>,
}

impl ParkedBy {
    /// Remembers `parking` for this thread's exit.
    fn remember(&self, parking: &Arc<Parking>) {
        if self.remembered.get() == Arc::as_ptr(parking) {
            return;
        }
        let Ok(mut parkings) = self.parkings.try_borrow_mut() else {
            return;
        };
        self.remembered.set(Arc::as_ptr(parking));
        if !parkings.iter().any(|p| p.as_ptr() == Arc::as_ptr(parking)) {
            parkings.retain(|p| p.strong_count() > 0);
            parkings.push(Arc::downgrade(parking));
        }
    }
}

impl Drop for ParkedBy {
    /// Hands the giving back to the pool's worker threads: a connection or the pool itself may
    /// close there (the last reference to a dropped `Db`'s pool may be this one), and closing a
    /// connection on a thread whose thread-locals are torn down would panic in the driver's
    /// runtime.
    fn drop(&mut self) {
        let thread = self.thread;
        for parking in self.parkings.get_mut().drain(..) {
            if let Some(parking) = parking.upgrade() {
                let workers = Arc::clone(&parking.workers);
                workers.execute(move || drop(parking.take_where(|p| p.thread == thread)));
            }
        }
    }
}

/// This thread's number and last slot (`None` while its thread-locals are torn down).
fn me() -> Option<(usize, usize)> {
    ME.try_with(|me| (me.thread, me.last.get())).ok()
}

impl Parking {
    /// Room for `max_size` parked connections, up to [`MAX_SLOTS`], swept on `workers` (the pool's
    /// own) every [`SWEEP_EVERY`]; parked connections go to the pool while any of `waiters` waits.
    pub(crate) fn start(
        max_size: u32,
        workers: &Arc<ScheduledThreadPool>,
        waiters: &Arc<Waiters>,
    ) -> Arc<Parking> {
        let slots = (0..max_size.clamp(1, MAX_SLOTS))
            .map(|_| Slot(Mutex::new(None)))
            .collect();
        let parking = Arc::new(Parking {
            slots,
            waiters: Arc::clone(waiters),
            workers: Arc::clone(workers),
            sweeper: Mutex::new(None),
        });
        let weak = Arc::downgrade(&parking);
        let job = workers.execute_at_fixed_rate(SWEEP_EVERY, SWEEP_EVERY, move || {
            if let Some(parking) = weak.upgrade() {
                parking.sweep();
            }
        });
        *parking.sweeper.lock() = Some(job);
        parking
    }

    /// The connection this thread parked last, when it is still parked.
    pub(crate) fn own(&self) -> Option<Box<dyn Pooled>> {
        let (me, last) = me()?;
        let mut slot = self.slot(last).lock();
        match slot.take() {
            Some(parked) if parked.thread == me => Some(parked.conn),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Any parked connection, looking first where this thread parked last.
    pub(crate) fn any(&self) -> Option<Box<dyn Pooled>> {
        let start = me().map_or(0, |(_, last)| last);
        (0..self.slots.len()).find_map(|k| {
            let taken = self.slot(start.wrapping_add(k)).lock().take();
            taken.map(|parked| parked.conn)
        })
    }

    /// Any parked connection, for a thread that [counted itself](Waiters::count) among the
    /// waiters first (a connection parked after the count was seen goes to the pool instead).
    pub(crate) fn for_waiter(&self, _counted: &Counted<'_>) -> Option<Box<dyn Pooled>> {
        fence(SeqCst);
        self.any()
    }

    /// Parks `conn` for this thread. Returns it when it must go back to the pool instead: a thread
    /// waits for a connection, or no slot is free.
    pub(crate) fn park(self: &Arc<Self>, conn: Box<dyn Pooled>) -> Option<Box<dyn Pooled>> {
        if self.waiters.any() {
            return Some(conn);
        }
        // A connection dropped while this thread's thread-locals are torn down is not parked: no
        // destructor would give it back when the thread ends.
        let me = ME.try_with(|me| {
            me.remember(self);
            (me.thread, me.last.get())
        });
        let Ok((me, start)) = me else {
            return Some(conn);
        };
        let mut conn = Some(conn);
        let mut parked_in = None;
        for k in 0..self.slots.len() {
            let i = start.wrapping_add(k) % self.slots.len();
            let mut slot = self.slots[i].lock();
            if slot.is_none() {
                *slot = conn.take().map(|conn| Parked {
                    thread: me,
                    conn,
                    swept: false,
                });
                parked_in = Some(i);
                break;
            }
        }
        let Some(i) = parked_in else {
            return conn;
        };
        let _ = ME.try_with(|me| me.last.set(i));
        fence(SeqCst);
        if self.waiters.any() {
            // A thread began to wait meanwhile and may not have seen this slot: the pool wakes it
            // (unless another thread took the connection meanwhile: it parks it again, and sees
            // the waiter then).
            return self.slots[i].lock().take().map(|parked| parked.conn);
        }
        None
    }

    /// Takes every parked connection out (to give them back to the pool).
    pub(crate) fn drain(&self) -> Vec<Box<dyn Pooled>> {
        self.take_where(|_| true)
    }

    /// Gives back to the pool each connection a sweep already saw parked, and marks the others:
    /// what lies parked unused through two sweeps goes back.
    pub(crate) fn sweep(&self) {
        drop(self.take_where(|parked| std::mem::replace(&mut parked.swept, true)));
    }

    /// Takes out the parked connections `which` picks (given back when the caller drops them,
    /// outside the slots' locks).
    fn take_where(&self, mut which: impl FnMut(&mut Parked) -> bool) -> Vec<Box<dyn Pooled>> {
        let mut taken = Vec::new();
        for slot in self.slots.iter() {
            let mut slot = slot.lock();
            if slot.as_mut().is_some_and(&mut which) {
                taken.extend(slot.take().map(|parked| parked.conn));
            }
        }
        taken
    }

    /// How many connections lie parked.
    #[cfg(feature = "testing")]
    pub(crate) fn parked(&self) -> usize {
        self.slots.iter().filter(|s| s.lock().is_some()).count()
    }

    fn slot(&self, i: usize) -> &Slot {
        &self.slots[i % self.slots.len()]
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        if let Some(job) = self.sweeper.get_mut().take() {
            job.cancel();
        }
    }
}

#[cfg(feature = "testing")]
impl crate::Db {
    /// How many connections lie parked for their threads (none unless `thread_affinity`).
    pub(crate) fn parked(&self) -> usize {
        self.pool.parking().map_or(0, |parking| parking.parked())
    }

    /// How many checkouts wait for a connection (in a pool pgtenure built).
    pub(crate) fn waiting_checkouts(&self) -> usize {
        self.pool
            .waiters()
            .map_or(0, |waiters| waiters.0.load(SeqCst))
    }
}

/// The checkouts of one pool that wait for a connection (or are about to): parked connections go
/// to the pool while any waits, and a broken connection going back asks the pool for another
/// (`conn::Reopen`).
#[derive(Default)]
pub(crate) struct Waiters(AtomicUsize);

impl Waiters {
    /// Counts a checkout among the waiters until the guard is dropped.
    pub(crate) fn count(&self) -> Counted<'_> {
        self.0.fetch_add(1, SeqCst);
        Counted(self)
    }

    /// Whether a checkout waits.
    pub(crate) fn any(&self) -> bool {
        self.0.load(SeqCst) > 0
    }
}

/// A checkout counted among a pool's [`Waiters`].
pub(crate) struct Counted<'a>(&'a Waiters);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, SeqCst);
    }
}
