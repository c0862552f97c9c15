//! The builder's pool: its r2d2 settings and [`DbBuilder::thread_affinity`].

use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;

use super::{DbBuilder, MAX_RECONNECT_BACKOFF};
use crate::db::conn::{ConnectAttempts, MakeTls};

impl DbBuilder {
    /// Whether each thread keeps the connection its last pgtenure statement ran on, for its next
    /// one, instead of handing it back to the pool. Defaults to `false`.
    ///
    /// A pool hands each call whichever connection came back last, which moves connections, their
    /// buffers and their sockets' state from thread to thread at every call: with eight threads
    /// calling as fast as they can on two cores, that costs about a sixth of the calls per second
    /// (docs/performance.md). With this on, the connection of a pgtenure statement is parked for
    /// the thread that used it; another thread takes it before it would wait for one, a thread
    /// that waits is handed any connection parked meanwhile, and the pool's `max_size` still bounds
    /// the connections. [`Db::pool_state`](crate::Db::pool_state) counts parked connections as
    /// idle.
    ///
    /// What it costs: a parked connection stays checked out of the pool, so the pool keeps up to
    /// one connection per thread that has used it (at most `max_size`), and r2d2 does not close a
    /// parked connection for its idle time or age. Turn it on for threads that call pgtenure in a
    /// tight loop (workers claiming ticks or permits), not for a thread per request or a pool kept
    /// small for the server's sake. Connections lent by [`Db::connection`](crate::Db::connection)
    /// are never parked. See docs/connections.md.
    pub fn thread_affinity(mut self, on: bool) -> DbBuilder {
        self.thread_affinity = on;
        self
    }

    /// The r2d2 pool's settings: no check on checkout (a round trip per operation), `attempts` as
    /// its error and event handler.
    pub(super) fn pool_builder<T: MakeTls>(
        &self,
        attempts: &ConnectAttempts,
    ) -> r2d2::Builder<PostgresConnectionManager<T>> {
        Pool::builder()
            .max_size(self.max_size)
            .connection_timeout(self.connection_timeout.min(MAX_RECONNECT_BACKOFF * 2))
            .test_on_check_out(false)
            .error_handler(Box::new(attempts.clone()))
            .event_handler(Box::new(attempts.clone()))
    }
}
