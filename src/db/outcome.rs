//! What may be sent again after a failure (classified in `error::classify`), and how a connection
//! is discarded.

use std::time::{Duration, Instant};

/// How long poking a dead connection may take (the server has closed it: it fails at once).
const POKE_TIMEOUT: Duration = Duration::from_millis(250);

const DISCARD_SQL: &str = include_str!("../../sql/schema/discard.sql");

/// Whether a statement whose connection failed after sending may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Only when the failure proves it never ran.
    IfNeverRan,
    /// Also once when its outcome is unknown: sending it again cannot do it twice.
    Idempotent,
}

/// How [`Db::with_conn`] sends a statement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    pub(crate) resend: Resend,
    /// Wait for a pool connection until then at most (and never past the pool's timeout).
    pub(crate) until: Option<Instant>,
}

impl Policy {
    pub(crate) const ONCE: Policy = Policy {
        resend: Resend::IfNeverRan,
        until: None,
    };
    pub(crate) const IDEMPOTENT: Policy = Policy {
        resend: Resend::Idempotent,
        until: None,
    };

    /// The same, waiting for a pool connection no later than `until`.
    pub(crate) fn until(self, until: Instant) -> Policy {
        Policy {
            until: Some(until),
            ..self
        }
    }
}

/// Makes sure a connection is never used again: r2d2 drops a connection the driver reports closed
/// when it is returned. Used for a connection whose session the server ended, and for one whose
/// cancel key was handed out (a cancel names a backend, not a statement: it could hit whatever runs
/// there next). A live session is ended by the server itself, then poked so the driver notices.
pub(crate) fn discard(conn: &mut postgres::Client) {
    for _ in 0..2 {
        if conn.is_closed() {
            return;
        }
        // A cancel still on its way may cancel this statement instead; then it is spent, and the
        // second pass ends the session.
        let _ = conn.simple_query(DISCARD_SQL);
        // The server closed the socket after its last message, so the poke fails at once.
        let _ = conn.is_valid(POKE_TIMEOUT);
    }
    if !conn.is_closed() {
        log::warn!(target: "pgtenure::db", "could not end a pooled connection that must not be reused");
    }
}
