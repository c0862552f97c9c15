//! The builder's pool: its r2d2 settings and [`DbBuilder::thread_affinity`].

use std::sync::Arc;

use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;
use scheduled_thread_pool::ScheduledThreadPool;

use super::{DbBuilder, MAX_RECONNECT_BACKOFF};
use crate::db::conn::{ConnectAttempts, MakeTls};

impl DbBuilder {
    /// Whether each thread keeps the connection its last pgtenure statement ran on, for its next
    /// one, instead of handing it back to the pool at once. Defaults to `true`.
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
    /// A parked connection goes back to the pool when its thread ends, and when it lay parked
    /// unused for one to two seconds (a sweep on the pool's worker threads, once a second); there
    /// r2d2's idle timeout and maximum lifetime apply to it again. So the pool keeps about the
    /// connections that ran in the last two seconds. Turn it off to hand every connection back at
    /// once. Connections lent by [`Db::connection`](crate::Db::connection) are never parked, nor
    /// those of a pool of the application's own ([`Db::from_pool`](crate::Db::from_pool)). See
    /// docs/connections.md.
    pub fn thread_affinity(mut self, on: bool) -> DbBuilder {
        self.thread_affinity = on;
        self
    }

    /// The r2d2 pool's settings: no check on checkout (a round trip per operation), `attempts` as
    /// its error and event handler, `workers` as its worker threads.
    pub(super) fn pool_builder<T: MakeTls>(
        &self,
        attempts: &ConnectAttempts,
        workers: &Arc<ScheduledThreadPool>,
    ) -> r2d2::Builder<PostgresConnectionManager<T>> {
        Pool::builder()
            .thread_pool(Arc::clone(workers))
            .max_size(self.max_size)
            .connection_timeout(self.connection_timeout.min(MAX_RECONNECT_BACKOFF * 2))
            .test_on_check_out(false)
            .error_handler(Box::new(attempts.clone()))
            .event_handler(Box::new(attempts.clone()))
    }
}

/// A pool's worker threads, as r2d2 would start them (three, named alike): they open connections,
/// close idle ones, and sweep parked ones back to the pool.
pub(super) fn workers() -> Arc<ScheduledThreadPool> {
    Arc::new(
        ScheduledThreadPool::builder()
            .num_threads(3)
            .thread_name_pattern("r2d2-worker-{}")
            .build(),
    )
}
