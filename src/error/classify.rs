//! What a failed statement's error says: whether it ran, whether its connection is gone. The
//! database layer decides from these what may be sent again; [`Error`](super::Error) tells callers
//! whether the outcome is unknown.

use std::error::Error as StdError;

use postgres::error::SqlState;

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
pub(crate) fn connection_lost(e: &postgres::Error) -> bool {
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
        None => broke(e),
    }
}

/// Whether the driver reports, without a server error, that the connection broke (closed, reset,
/// timed out) rather than that it refused a value.
pub(crate) fn broke(e: &postgres::Error) -> bool {
    e.is_closed() || StdError::source(e).is_some_and(|s| s.is::<std::io::Error>())
}
