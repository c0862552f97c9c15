//! The open connections: admitted up to the limit, each in its phase, shut down by a stop.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Connections open at once (a thread each); beyond them a connection is answered 503 at once.
pub(super) const MAX_CONNECTIONS: usize = 512;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Reading the request: closed at once by a stop.
    Head,
    /// Answering: given a grace period by a stop.
    Answering,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// [`MAX_CONNECTIONS`] are open (or no thread could be started for it).
    Full,
    /// A stop began after the connection was accepted.
    Stopping,
}

#[derive(Debug, Default)]
struct Open {
    /// Each open connection's socket (shared with its thread, to shut it down: one descriptor
    /// per connection) and phase.
    connections: HashMap<u64, (Arc<TcpStream>, Phase)>,
    next: u64,
    stopping: bool,
}

/// The open connections, shared by the accepting thread, the connections' threads and the stop.
#[derive(Debug, Default)]
pub(super) struct Connections {
    open: Mutex<Open>,
    closed: Condvar,
}

impl Connections {
    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `stream` in, unless [`MAX_CONNECTIONS`] are open or the server stops.
    /// Admits no more connections: a stop began.
    pub(super) fn stop_admitting(&self) {
        self.lock().stopping = true;
    }

    /// Whether a stop began.
    pub(super) fn is_stopping(&self) -> bool {
        self.lock().stopping
    }

    pub(super) fn admit(&self, stream: &Arc<TcpStream>) -> Result<u64, Refused> {
        let mut open = self.lock();
        if open.stopping {
            return Err(Refused::Stopping);
        }
        if open.connections.len() >= MAX_CONNECTIONS {
            return Err(Refused::Full);
        }
        let id = open.next;
        open.next += 1;
        open.connections.insert(id, (stream.clone(), Phase::Head));
        Ok(id)
    }

    pub(super) fn answering(&self, id: u64) {
        if let Some((_, phase)) = self.lock().connections.get_mut(&id) {
            *phase = Phase::Answering;
        }
    }

    pub(super) fn close(&self, id: u64) {
        self.lock().connections.remove(&id);
        self.closed.notify_all();
    }

    /// Shuts down the connections in `phase` (every one with `None`): a thread reading or writing
    /// on one returns at once.
    pub(super) fn shut_down(&self, phase: Option<Phase>) {
        for (stream, at) in self.lock().connections.values() {
            if phase.is_none_or(|p| p == *at) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Waits until a connection closes, `timeout` at most.
    pub(super) fn wait_for_a_close(&self, timeout: Duration) {
        let open = self.lock();
        let _ = self
            .closed
            .wait_timeout(open, timeout)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Waits at most `grace` for every connection to close; how many are still open.
    pub(super) fn wait(&self, grace: Duration) -> usize {
        let open = self.lock();
        let (open, _) = self
            .closed
            .wait_timeout_while(open, grace, |open| !open.connections.is_empty())
            .unwrap_or_else(PoisonError::into_inner);
        open.connections.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_connection_accepted_as_a_stop_begins_is_refused_for_the_stop_not_for_the_limit() {
        // It was answered "too many connections" with one connection open.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = Arc::new(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
        let connections = Connections::default();
        let id = connections.admit(&stream).unwrap();
        connections.close(id);
        connections.stop_admitting();
        assert_eq!(connections.admit(&stream), Err(Refused::Stopping));
    }
}
