//! The pooled connection every statement runs on, apart from the pool that hands it out.
//!
//! A [`Db`](crate::Db) holds its pool behind [`Source`], whatever TLS connector the pool's manager
//! was built with, so one `Db` type serves plain pools, pgtenure's TLS pools and a user's own pool
//! of any TLS stack. The cost is one boxed handle per checkout (next to a round trip, nothing).

use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::{CancelToken, Client, Socket};
use r2d2::{Pool, PooledConnection};
use r2d2_postgres::PostgresConnectionManager;
use scheduled_thread_pool::ScheduledThreadPool;

use super::parking::{Parking, Pooled, Waiters};
use crate::statement::Cache;

/// A connection from a [`Db`](crate::Db)'s pool: a [`postgres::Client`](https://docs.rs/postgres/0.19/postgres/struct.Client.html) (it derefs to one) that
/// goes back to the pool when dropped.
///
/// Get one with [`Db::connection`](crate::Db::connection), for your own statements on the pool
/// pgtenure uses: a fenced write ([`Leases::fence`](crate::leases::Leases::fence)), a check, a migration.
pub struct Connection {
    /// Taken out only by `drop` and [`Connection::into_pooled`].
    pooled: ManuallyDrop<Box<dyn Pooled>>,
    /// Set on a connection lent to the application, which counts against [`Lending`]'s limit.
    lent: Option<Lent>,
    /// Set on a connection that must go back to the pool, never to a parking slot
    /// ([`Connection::never_park`]).
    unparkable: bool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // SAFETY: `pooled` is not used again: this is the connection's end.
        drop(unsafe { ManuallyDrop::take(&mut self.pooled) });
    }
}

impl Connection {
    /// Gives the connection back to the pool when its statement is done, not to a parking slot:
    /// for one that was discarded (`outcome::discard`), in case its session outlived that.
    pub(crate) fn never_park(&mut self) {
        self.unparkable = true;
    }

    /// The pooled connection, to park: `None` (the connection dropped, back to the pool) when it is
    /// lent, closed or never to be parked.
    fn into_parkable(self) -> Option<Box<dyn Pooled>> {
        if self.lent.is_some() || self.unparkable || self.pooled.client().is_closed() {
            return None;
        }
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped and `pooled` never used again; `lent` is `None` and
        // `unparkable` a `bool`, so nothing else of it needs dropping.
        Some(unsafe { ManuallyDrop::take(&mut this.pooled) })
    }

    /// Parks the connection for this thread's next statement when the returned guard is dropped,
    /// instead of giving it back to the pool (see `parking.rs`): with a `parking`, unless it is
    /// closed, lent or [never to be parked](Connection::never_park) by then.
    pub(crate) fn parked_in(self, parking: Option<&Arc<Parking>>) -> Parks<'_> {
        Parks {
            conn: ManuallyDrop::new(self),
            parking,
        }
    }

    /// Marks the connection as lent to the application until it is dropped.
    pub(crate) fn lend(mut self, lent: Lent) -> Connection {
        self.lent = Some(lent);
        self
    }

    /// The client and the statement cache kept with it (how statements are sent on it, and those
    /// prepared on it).
    pub(crate) fn client_and_cache(&mut self) -> (&mut Client, &mut Cache) {
        self.pooled.client_and_cache()
    }
}

impl Deref for Connection {
    type Target = Client;

    fn deref(&self) -> &Client {
        self.pooled.client()
    }
}

impl DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut Client {
        self.pooled.client_mut()
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("closed", &self.pooled.client().is_closed())
            .finish()
    }
}

/// A connection of one statement, parked for its thread when dropped
/// ([`Connection::parked_in`]). It borrows the parking rather than sharing it, so that a statement
/// writes no reference count that every thread's statements write too.
pub(crate) struct Parks<'a> {
    /// Taken out only by `drop`.
    conn: ManuallyDrop<Connection>,
    parking: Option<&'a Arc<Parking>>,
}

impl Drop for Parks<'_> {
    fn drop(&mut self) {
        // SAFETY: `conn` is not used again: this is the guard's end.
        let conn = unsafe { ManuallyDrop::take(&mut self.conn) };
        let Some(parking) = self.parking else {
            return;
        };
        if let Some(pooled) = conn.into_parkable() {
            // What is not parked goes back to the pool here.
            drop(parking.park(pooled));
        }
    }
}

impl Deref for Parks<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Parks<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// A cancel request for one connection's running statement, sent with the TLS connector of the
/// pool the connection came from.
pub(crate) struct CancelKey {
    token: CancelToken,
    canceller: Arc<dyn Canceller>,
}

impl CancelKey {
    /// The cancel key of `client`'s running statement, sent with `canceller`'s connector.
    pub(crate) fn new(client: &Client, canceller: &Arc<dyn Canceller>) -> CancelKey {
        CancelKey {
            token: client.cancel_token(),
            canceller: Arc::clone(canceller),
        }
    }

    /// Sends the cancel request (opens a connection: may block up to the connect timeout).
    pub(crate) fn cancel(&self) -> Result<(), postgres::Error> {
        self.canceller.cancel(&self.token)
    }
}

impl fmt::Debug for CancelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelKey").finish_non_exhaustive()
    }
}

/// The pool behind a [`Db`](crate::Db), whatever its TLS connector.
pub(crate) trait Source: Send + Sync {
    /// A connection, waiting at most `wait`, once [`try_get`](Source::try_get) found none at hand
    /// (it does not look at this thread's parked connection again).
    fn wait_for(&self, wait: Duration) -> Result<Connection, r2d2::Error>;
    /// An idle connection, without waiting.
    fn try_get(&self) -> Option<Connection>;
    /// Where connections that served pgtenure's own statements are parked for their threads
    /// (none in a pool of the application's own).
    fn parking(&self) -> Option<&Arc<Parking>>;
    /// The checkouts waiting for a connection, in a pool pgtenure built.
    #[cfg(feature = "testing")]
    fn waiters(&self) -> Option<&Waiters>;
    /// What sends cancel requests for this pool's connections, with its TLS connector.
    fn canceller(&self) -> &Arc<dyn Canceller>;
    fn connection_timeout(&self) -> Duration;
    /// The last failed attempt to connect, with its cause, when known.
    fn last_connect_error(&self) -> Option<String>;
    fn max_size(&self) -> u32;
    fn state(&self) -> r2d2::State;
}

/// What a TLS connector must be for an r2d2 pool of it (r2d2_postgres's own bounds), in one name.
pub(crate) trait MakeTls:
    MakeTlsConnect<Socket, Stream: Send, TlsConnect: Send + TlsConnect<Socket, Future: Send>>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> MakeTls for T where
    T: MakeTlsConnect<Socket, Stream: Send, TlsConnect: Send + TlsConnect<Socket, Future: Send>>
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// A pool of `PostgresConnectionManager<T>` with the connector its cancel requests use.
pub(crate) struct Pooling<T: MakeTls> {
    /// Taken out only by `drop`.
    pool: ManuallyDrop<Pool<PostgresConnectionManager<T>>>,
    canceller: Arc<dyn Canceller>,
    /// How long a checkout waits for a connection (the pool's own setting may be shorter).
    wait: Duration,
    /// The pool's last failed attempt to connect, when pgtenure built the pool.
    attempts: Option<ConnectAttempts>,
    /// What asks for a connection when a broken one goes back, when pgtenure built the pool.
    reopen: Option<Arc<Reopen<T>>>,
    /// Each thread's last connection, parked for it ([`DbBuilder::thread_affinity`](crate::DbBuilder::thread_affinity)): only in a
    /// pool pgtenure built, which no one else takes connections from (a pool of the application's
    /// own may be asked directly, and r2d2 knows nothing of parked connections).
    parking: Option<Arc<Parking>>,
    /// The pool's worker threads, when pgtenure built it.
    workers: Option<Arc<ScheduledThreadPool>>,
}

impl<T: MakeTls> Drop for Pooling<T> {
    /// Closes the pool's connections on another thread when this one's runtime context is gone (a
    /// `Db` dropped by a thread-local's destructor) or is an async runtime's (a `Db` dropped in a
    /// task): closing one here would panic in the driver (and a panic in a thread-local's
    /// destructor aborts the process).
    fn drop(&mut self) {
        // SAFETY: `pool` is not used again: this is the pool's end.
        let pool = unsafe { ManuallyDrop::take(&mut self.pool) };
        let (parking, reopen) = (self.parking.take(), self.reopen.take());
        let close = move || {
            drop(parking);
            drop(reopen);
            drop(pool);
        };
        let here =
            matches!(tokio::runtime::Handle::try_current(), Err(e) if e.is_missing_context());
        if here {
            close();
        } else if let Some(workers) = &self.workers {
            workers.execute(close);
        } else if let Err(e) = std::thread::Builder::new()
            .name("pgtenure-pool-close".into())
            .spawn(close)
        {
            log::warn!(target: "pgtenure::db", "could not start a thread to close the pool's connections: {e}");
        }
    }
}

/// r2d2's error and event handler for the pools pgtenure builds: keeps the last failed attempt to
/// open a connection with its whole cause ("error connecting to server: Connection refused (os
/// error 111)"; r2d2 keeps only the first words) until a connection opens, so a checkout that times
/// out meanwhile says why, and logs it under `pgtenure::db` at `warn` (r2d2 would log every attempt
/// at `error`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnectAttempts(Arc<parking_lot::Mutex<Option<String>>>);

impl ConnectAttempts {
    pub(crate) fn last(&self) -> Option<String> {
        self.0.lock().clone()
    }
}

impl r2d2::HandleError<postgres::Error> for ConnectAttempts {
    fn handle_error(&self, error: postgres::Error) {
        let mut text = error.to_string();
        let mut cause = std::error::Error::source(&error);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        log::warn!(target: "pgtenure::db", "opening a pool connection failed: {text}");
        *self.0.lock() = Some(text);
    }
}

/// A connection opened: the last failure is history, and no longer the reason for a wait.
impl r2d2::HandleEvent for ConnectAttempts {
    fn handle_acquire(&self, _event: r2d2::event::AcquireEvent) {
        *self.0.lock() = None;
    }
}

impl<T: MakeTls> Pooling<T> {
    /// A pool whose checkouts wait for its own connection timeout, up to 100 years (r2d2 takes
    /// any: a deadline that far would overflow an `Instant`).
    pub(crate) fn new(pool: Pool<PostgresConnectionManager<T>>, tls: T) -> Pooling<T> {
        let wait = pool.connection_timeout().min(crate::input::MAX_DURATION);
        Pooling {
            pool: ManuallyDrop::new(pool),
            canceller: Arc::new(CancelWith(tls)),
            wait,
            attempts: None,
            reopen: None,
            parking: None,
            workers: None,
        }
    }

    /// A pool pgtenure built: its checkouts wait up to `wait`, longer than the pool's own
    /// connection timeout (which also caps r2d2's back-off between attempts to reconnect: half of
    /// it), `attempts` is its error handler, `workers` its worker threads, and its threads keep
    /// their connections when `affinity` (parked connections are swept on the workers).
    pub(crate) fn built(
        pool: Pool<PostgresConnectionManager<T>>,
        tls: T,
        wait: Duration,
        attempts: ConnectAttempts,
        (workers, affinity): (&Arc<ScheduledThreadPool>, bool),
    ) -> Pooling<T> {
        let waiters = Arc::new(Waiters::default());
        Pooling {
            parking: affinity.then(|| Parking::start(pool.max_size(), workers, &waiters)),
            reopen: Some(Arc::new(Reopen {
                pool: Pool::clone(&pool),
                waiters,
            })),
            pool: ManuallyDrop::new(pool),
            canceller: Arc::new(CancelWith(tls)),
            wait,
            attempts: Some(attempts),
            workers: Some(Arc::clone(workers)),
        }
    }

    fn checkout(&self, pooled: PooledConnection<PostgresConnectionManager<T>>) -> Box<dyn Pooled> {
        Box::new(Checkout {
            pooled: ManuallyDrop::new(pooled),
            cache: None,
            reopen: self.reopen.clone(),
        })
    }

    fn wrap(&self, pooled: Box<dyn Pooled>) -> Connection {
        Connection {
            pooled: ManuallyDrop::new(pooled),
            lent: None,
            unparkable: false,
        }
    }

    /// A connection without waiting: this thread's parked one, an idle one of the pool, another
    /// thread's parked one.
    fn at_hand(&self) -> Option<Box<dyn Pooled>> {
        let parking = self.parking.as_deref();
        parking.and_then(Parking::own).or_else(|| {
            self.pool
                .try_get()
                .map(|pooled| self.checkout(pooled))
                .or_else(|| parking.and_then(Parking::any))
        })
    }
}

impl<T: MakeTls> Source for Pooling<T> {
    fn wait_for(&self, wait: Duration) -> Result<Connection, r2d2::Error> {
        // Counted among the waiters until this function returns: a connection parked from now on
        // goes to the pool, and a broken one going back asks the pool for another (`Reopen`).
        let counted = self.reopen.as_deref().map(|reopen| reopen.waiters.count());
        // The other threads' parked connections are looked at again, then the pool's idle ones
        // (by r2d2); this thread's own is not: only this thread parks it, and it is here.
        let parked = self.parking.as_deref().zip(counted.as_ref());
        if let Some(pooled) = parked.and_then(|(parking, counted)| parking.for_waiter(counted)) {
            return Ok(self.wrap(pooled));
        }
        let pooled = self.pool.get_timeout(wait)?;
        Ok(self.wrap(self.checkout(pooled)))
    }

    fn try_get(&self) -> Option<Connection> {
        self.at_hand().map(|pooled| self.wrap(pooled))
    }

    fn parking(&self) -> Option<&Arc<Parking>> {
        self.parking.as_ref()
    }

    #[cfg(feature = "testing")]
    fn waiters(&self) -> Option<&Waiters> {
        self.reopen.as_deref().map(|reopen| &*reopen.waiters)
    }

    fn canceller(&self) -> &Arc<dyn Canceller> {
        &self.canceller
    }

    fn connection_timeout(&self) -> Duration {
        self.wait
    }

    fn last_connect_error(&self) -> Option<String> {
        self.attempts.as_ref().and_then(ConnectAttempts::last)
    }

    fn max_size(&self) -> u32 {
        self.pool.max_size()
    }

    fn state(&self) -> r2d2::State {
        // Parked connections are idle: back in the pool, they are counted as such.
        if let Some(parking) = &self.parking {
            drop(parking.drain());
        }
        self.pool.state()
    }
}

/// A connection checked out of r2d2 with the statement cache kept with it: taken out of its r2d2
/// extensions at the checkout's first statement and put back when it returns to the pool, so the
/// statements of a parked connection find their cache without a lookup (two hashed lookups of a
/// type's id per statement, a tenth of what pgtenure adds to the driver's work per call).
struct Checkout<T: MakeTls> {
    /// Taken out only by `drop`.
    pooled: ManuallyDrop<PooledConnection<PostgresConnectionManager<T>>>,
    cache: Option<Cache>,
    /// Asked for a connection when this one goes back broken (in a pool pgtenure built).
    reopen: Option<Arc<Reopen<T>>>,
}

impl<T: MakeTls> Drop for Checkout<T> {
    /// Gives the connection back; when r2d2 discards it as broken, see [`Reopen`].
    fn drop(&mut self) {
        if let Some(cache) = self.cache.take() {
            PooledConnection::extensions_mut(&mut self.pooled).insert(cache);
        }
        // r2d2's own test for a broken connection (`has_broken`).
        let broken = self.pooled.is_closed();
        // SAFETY: `pooled` is not used again: this is the checkout's end.
        drop(unsafe { ManuallyDrop::take(&mut self.pooled) });
        if let (true, Some(reopen)) = (broken, &self.reopen) {
            reopen.discarded();
        }
    }
}

/// Asks a pool pgtenure built for a connection when a broken one was discarded while a checkout
/// waits. r2d2 opens connections for a checkout when it begins to wait, and a pool that keeps none
/// idle (`DbBuilder::build_lazy`, r2d2's `min_idle` 0) opens none when it discards a broken one:
/// the waiting checkout would wait out its whole timeout with room in the pool. With nobody
/// waiting nothing is asked (a server that is down is not asked once per discarded connection).
/// r2d2's record of its last connect error is taken by the asking: these pools' errors use their
/// own ([`ConnectAttempts`]).
struct Reopen<T: MakeTls> {
    pool: Pool<PostgresConnectionManager<T>>,
    /// The pool's checkouts about to wait or waiting in r2d2, counted before they lock the pool:
    /// a connection discarded after a waiter locked the pool sees it counted here, and one
    /// discarded before leaves room that r2d2 fills when the checkout begins to wait.
    waiters: Arc<Waiters>,
}

impl<T: MakeTls> Reopen<T> {
    /// A broken connection was discarded (after r2d2 took it off its count).
    fn discarded(&self) {
        if self.waiters.any() {
            // Without waiting: an idle connection it finds goes straight back.
            drop(self.pool.get_timeout(Duration::ZERO));
        }
    }
}

impl<T: MakeTls> Pooled for Checkout<T> {
    fn client(&self) -> &Client {
        &self.pooled
    }

    fn client_mut(&mut self) -> &mut Client {
        &mut self.pooled
    }

    fn client_and_cache(&mut self) -> (&mut Client, &mut Cache) {
        let pooled = &mut self.pooled;
        let cache = self.cache.get_or_insert_with(|| {
            PooledConnection::extensions_mut(pooled)
                .remove()
                .unwrap_or_default()
        });
        (pooled, cache)
    }
}

/// Sends cancel requests with one TLS connector.
pub(crate) trait Canceller: Send + Sync {
    fn cancel(&self, token: &CancelToken) -> Result<(), postgres::Error>;
}

struct CancelWith<T>(T);

impl<T: MakeTls> Canceller for CancelWith<T> {
    fn cancel(&self, token: &CancelToken) -> Result<(), postgres::Error> {
        token.cancel_query(self.0.clone())
    }
}

/// How many connections the application may borrow at once ([`Db::connection`](crate::Db::connection)):
/// one fewer than the pool's size, so that lease renewals and membership heartbeats, which run on
/// threads of pgtenure's own, always find a connection the application cannot hold.
pub(crate) struct Lending {
    limit: u32,
    lent: Mutex<u32>,
    returned: Condvar,
}

impl Lending {
    /// Keeps one connection of a pool of `max_size` away from the application (none of a pool of
    /// one, which has none to spare).
    pub(crate) fn new(max_size: u32) -> Lending {
        Lending {
            limit: max_size.saturating_sub(1).max(1),
            lent: Mutex::new(0),
            returned: Condvar::new(),
        }
    }

    /// A slot to lend a connection in, waiting until `until` at most.
    pub(crate) fn take(self: &Arc<Self>, until: Instant) -> Option<Lent> {
        let mut lent = self.lent.lock();
        while *lent >= self.limit {
            if self.returned.wait_until(&mut lent, until).timed_out() && *lent >= self.limit {
                return None;
            }
        }
        *lent += 1;
        Some(Lent(Arc::clone(self)))
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }
}

/// One lent connection's slot, given back when the connection is dropped.
pub(crate) struct Lent(Arc<Lending>);

impl Drop for Lent {
    fn drop(&mut self) {
        *self.0.lent.lock() -= 1;
        self.0.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lending_keeps_one_connection_back_and_waits_for_a_return() {
        let lending = Arc::new(Lending::new(3));
        let soon = || Instant::now() + Duration::from_millis(20);
        let first = lending.take(soon()).expect("one of three");
        let second = lending.take(soon()).expect("two of three");
        assert!(lending.take(soon()).is_none(), "the third is kept back");
        let waiter = {
            let lending = Arc::clone(&lending);
            std::thread::spawn(move || {
                lending
                    .take(Instant::now() + Duration::from_secs(5))
                    .is_some()
            })
        };
        drop(first);
        assert!(
            waiter.join().unwrap(),
            "a returned slot is taken by a waiter"
        );
        drop(second);
        assert_eq!(
            Lending::new(1).limit(),
            1,
            "a pool of one lends its only connection"
        );
    }
}
