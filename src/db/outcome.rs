//! Whether a failed statement ran: what may be sent again, and how a connection is discarded.

use std::error::Error as StdError;
use std::time::{Duration, Instant};

use postgres::error::SqlState;

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

/// Whether a failure proves the statement did not take effect: the server's only answer was that
/// the session had ended (terminated by an administrator or a fast shutdown, 57P01; an idle-session
/// timeout, 57P05; a server not accepting connections yet, 57P03). Such a `FATAL` report comes
/// either before the statement was read or instead of its commit. A closed or reset connection
/// proves nothing: the driver reports that too when the socket closes right after the server
/// committed and answered. A crash shutdown (57P02) can interrupt a backend after its commit.
pub(crate) fn never_ran(e: &postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        let code = db.code();
        *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::IDLE_SESSION_TIMEOUT
            || *code == SqlState::CANNOT_CONNECT_NOW
    })
}

/// Whether the server rolled the statement back to break a deadlock (40P01): it did not take
/// effect, and the connection is fine, so it may be sent again whatever its policy. Deadlocks
/// between pgtenure's own statements and an operator's (a membership unit re-weighted while its
/// process row is deleted) are rare and short: the statement that lost is sent again.
pub(crate) fn deadlocked(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
}

/// Whether a failure says the connection or its server session is gone (closed, reset, a crash
/// shutdown 57P02, a connection exception of class 08 such as a pooler's "server conn crashed"),
/// rather than that the server refused the statement.
pub(super) fn connection_lost(e: &postgres::Error) -> bool {
    match e.as_db_error() {
        None => true,
        Some(db) => *db.code() == SqlState::CRASH_SHUTDOWN || db.code().code().starts_with("08"),
    }
}

/// Whether the statement may have taken effect although it failed: the connection closed or broke
/// after it was sent, or the server crashed while it ran. A server error report otherwise means it
/// did not (the implicit transaction rolled back).
pub(crate) fn outcome_unknown(e: &postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => *db.code() == SqlState::CRASH_SHUTDOWN,
        None => e.is_closed() || StdError::source(e).is_some_and(|s| s.is::<std::io::Error>()),
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
