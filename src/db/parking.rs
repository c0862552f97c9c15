//! Each thread's last connection, kept for that thread between its statements.
//!
//! Handing every statement whichever connection went back to the pool last moves a connection,
//! with its buffers, its runtime and its socket's state, from thread to thread at every call: with
//! eight threads on two cores that cost a fifth of the calls per second a connection of each
//! thread's own reaches (docs/performance.md, "at once"). So, with
//! [`DbBuilder::thread_affinity`](crate::DbBuilder::thread_affinity) on (it is off by default,
//! and never applies to a pool of the application's own), a connection that served one of
//! pgtenure's own statements is not given back to the r2d2 pool but parked in a slot, and the
//! thread that parked it takes it from there next time without touching the pool.
//!
//! A parked connection stays available to every other thread, and the pool's limits hold:
//! - a checkout takes, in this order, the thread's own parked connection, an idle one from the
//!   pool, any parked one, and only then waits in the pool;
//! - a thread about to wait first counts itself in `waiters`, then looks at the slots again; a
//!   thread parking looks at `waiters` after parking and, if anyone waits, takes a parked
//!   connection back out and gives it to the pool, which wakes a waiter. Both sides separate their
//!   write from their read with a sequentially consistent fence, so at least one of them sees the
//!   other: no connection stays parked while a thread waits for one;
//! - parked connections are still checked out of r2d2, which so never opens more than its
//!   `max_size`; reading the pool's state ([`Parking::drain`]) first gives them all back, so its
//!   count of idle connections stays true.

use std::cell::Cell;
use std::sync::atomic::{fence, AtomicUsize, Ordering::SeqCst};

use parking_lot::Mutex;
use postgres::Client;
use r2d2::Extensions;

/// A pooled client of some manager, with its r2d2 extensions: what is parked.
pub(crate) trait Pooled: Send {
    fn client(&self) -> &Client;
    fn client_mut(&mut self) -> &mut Client;
    fn extensions_mut(&mut self) -> &mut Extensions;
}

/// A parked connection and the thread that parked it.
type Slot = Mutex<Option<(usize, Box<dyn Pooled>)>>;

/// The slots of one pool's parked connections (one per connection the pool may open).
pub(crate) struct Parking {
    slots: Box<[Slot]>,
    /// Threads waiting in the pool for a connection.
    waiters: AtomicUsize,
}

/// The most connections parked at once: a checkout that finds none of its own looks at every slot,
/// so their number is bounded (the connections of a larger pool beyond these go back to it).
const MAX_SLOTS: u32 = 64;

/// Numbers the threads that park.
static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's number.
    static ME: usize = NEXT_THREAD.fetch_add(1, SeqCst);
    /// The slot this thread parked its last connection in (of any pool: for a thread using
    /// several, a hint that may miss); at first its number, which spreads the threads' slots.
    static LAST: Cell<usize> = Cell::new(ME.try_with(|me| *me).unwrap_or(0));
}

impl Parking {
    /// Room for `max_size` parked connections, up to [`MAX_SLOTS`].
    pub(crate) fn new(max_size: u32) -> Parking {
        let slots = (0..max_size.clamp(1, MAX_SLOTS))
            .map(|_| Mutex::new(None))
            .collect();
        Parking {
            slots,
            waiters: AtomicUsize::new(0),
        }
    }

    /// The connection this thread parked last, when it is still parked.
    pub(crate) fn own(&self) -> Option<Box<dyn Pooled>> {
        let (Ok(me), Ok(last)) = (ME.try_with(|me| *me), LAST.try_with(Cell::get)) else {
            return None;
        };
        let mut slot = self.slot(last).lock();
        match slot.take() {
            Some((parker, conn)) if parker == me => Some(conn),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Any parked connection, looking first where this thread parked last.
    pub(crate) fn any(&self) -> Option<Box<dyn Pooled>> {
        let start = LAST.try_with(Cell::get).unwrap_or(0);
        (0..self.slots.len()).find_map(|k| {
            let taken = self.slot(start.wrapping_add(k)).lock().take();
            taken.map(|(_, conn)| conn)
        })
    }

    /// Counts this thread among the waiters until the guard is dropped, then returns any parked
    /// connection (parked before the count was seen).
    pub(crate) fn wait(&self) -> (Waiting<'_>, Option<Box<dyn Pooled>>) {
        self.waiters.fetch_add(1, SeqCst);
        fence(SeqCst);
        (Waiting(self), self.any())
    }

    /// Parks `conn` for this thread. Returns it when it must go back to the pool instead: a thread
    /// waits for a connection, or no slot is free.
    pub(crate) fn park(&self, conn: Box<dyn Pooled>) -> Option<Box<dyn Pooled>> {
        if self.waiters.load(SeqCst) > 0 {
            return Some(conn);
        }
        // A connection dropped while this thread's thread-locals are torn down is not parked.
        let (Ok(me), Ok(start)) = (ME.try_with(|me| *me), LAST.try_with(Cell::get)) else {
            return Some(conn);
        };
        let mut conn = Some(conn);
        let mut parked_in = None;
        for k in 0..self.slots.len() {
            let i = start.wrapping_add(k) % self.slots.len();
            let mut slot = self.slots[i].lock();
            if slot.is_none() {
                *slot = conn.take().map(|conn| (me, conn));
                parked_in = Some(i);
                break;
            }
        }
        let Some(i) = parked_in else {
            return conn;
        };
        let _ = LAST.try_with(|last| last.set(i));
        fence(SeqCst);
        if self.waiters.load(SeqCst) > 0 {
            // A thread began to wait meanwhile and may not have seen this slot: the pool wakes it
            // (unless another thread took the connection meanwhile: it parks it again, and sees
            // the waiter then).
            return self.slots[i].lock().take().map(|(_, conn)| conn);
        }
        None
    }

    /// Takes every parked connection out (to give them back to the pool).
    pub(crate) fn drain(&self) -> Vec<Box<dyn Pooled>> {
        self.slots
            .iter()
            .filter_map(|s| s.lock().take().map(|(_, conn)| conn))
            .collect()
    }

    fn slot(&self, i: usize) -> &Slot {
        &self.slots[i % self.slots.len()]
    }
}

/// A thread counted among the waiters of a [`Parking`].
pub(crate) struct Waiting<'a>(&'a Parking);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, SeqCst);
    }
}
