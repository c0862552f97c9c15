//! What a failed statement's error says: whether it ran, whether its connection is gone, and (by
//! its SQLSTATE) which kind of error it is and what to do about it. The database layer decides
//! from these what may be sent again; [`Error`](super::Error) tells callers whether the outcome is
//! unknown.

use std::error::Error as StdError;

use postgres::error::{DbError, SqlState};

use super::ErrorKind;

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

/// Chooses the kind and the advice for a server-side error from its SQLSTATE.
pub(super) fn classify_db_error(db: &DbError) -> (ErrorKind, &'static str) {
    let code = db.code();
    refused_transaction(code)
        .or_else(|| refused_login(code))
        .or_else(|| interrupted(code))
        .or_else(|| refused_by_schema(code))
        .unwrap_or((ErrorKind::Database, "the database refused the statement"))
}

/// A statement the database rolled back (a deadlock, a serialization failure) or whose values it
/// cannot store.
fn refused_transaction(code: &SqlState) -> Option<(ErrorKind, &'static str)> {
    if *code == SqlState::T_R_DEADLOCK_DETECTED {
        return Some((
            ErrorKind::Serialization,
            "the database rolled it back to break a deadlock with another session, and it was \
             sent again in vain; it did not take effect and retrying is safe",
        ));
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE {
        return Some((
            ErrorKind::Serialization,
            "the database refused it under a non-default isolation level; pgtenure's statements are \
             written for READ COMMITTED (see Db::connect), retrying is safe",
        ));
    }
    if *code == SqlState::CHARACTER_NOT_IN_REPERTOIRE
        || *code == SqlState::UNTRANSLATABLE_CHARACTER
        || *code == SqlState::PROGRAM_LIMIT_EXCEEDED
    {
        return Some((
            ErrorKind::InvalidInput,
            "the database refused a value as too long or not storable",
        ));
    }
    None
}

/// A connection the server refused: no rule admits it, the credentials, the database.
fn refused_login(code: &SqlState) -> Option<(ErrorKind, &'static str)> {
    // 28000: no pg_hba.conf rule admits the connection, or the role does not exist or may not log
    // in; nothing to do with a password.
    if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
        return Some((
            ErrorKind::Database,
            "the server admits no such connection: check the user (it must exist and may log in), \
             the database, and the server's pg_hba.conf rules for this address; where they admit \
             only TLS (hostssl), connect with sslmode=require or stronger, and where they ask for \
             a client certificate (cert), give it with sslcert and sslkey (or PGSSLCERT, PGSSLKEY)",
        ));
    }
    if code.code().starts_with("28") {
        return Some((
            ErrorKind::Database,
            "the server refused the credentials; check the user and password (in the URL, \
             PGPASSWORD or ~/.pgpass), and the server's pg_hba.conf",
        ));
    }
    if *code == SqlState::INVALID_CATALOG_NAME {
        return Some((
            ErrorKind::Database,
            "create the database, or fix its name in the URL",
        ));
    }
    None
}

/// A statement cancelled, or a connection broken, unavailable or mixed up by a pooler.
fn interrupted(code: &SqlState) -> Option<(ErrorKind, &'static str)> {
    // pgtenure's own cancels (a lease's deadline watcher) are told apart where they are sent
    // (`Error::cancelled_by_pgtenure`): this one came from the server or from someone else.
    if *code == SqlState::QUERY_CANCELED {
        return Some((
            ErrorKind::Timeout,
            "the server cancelled the statement: the statement_timeout set for the role, the \
             database or the connection ran out, or someone cancelled the backend \
             (pg_cancel_backend); it did not take effect, retry; pgtenure's statements are short, \
             so one that outlasts a timeout usually waited for a row lock (a transaction left open \
             on a row it needs) or an overloaded server; else raise statement_timeout for \
             pgtenure's role (ALTER ROLE ... SET statement_timeout)",
        ));
    }
    // A pooler that does not track protocol-level prepared statements answers a statement sent to
    // the wrong server connection this way.
    if *code == SqlState::PROTOCOL_VIOLATION {
        return Some((
            ErrorKind::Connection,
            "the server, or a pooler between it and pgtenure, found the protocol violated: a \
             pooler that does not track protocol-level prepared statements (PgBouncer in \
             transaction mode before 1.21 or with max_prepared_statements = 0, pgcat, Supavisor) \
             mixes them up between its clients; behind one, use statement_mode=auto or \
             statement_mode=sql, never statement_mode=protocol",
        ));
    }
    let class = &code.code()[..2];
    // 08: connection exception; 57: operator intervention (shutdown, restart);
    // 53: insufficient resources (too many connections).
    if class == "08" || class == "57" || class == "53" {
        return Some((
            ErrorKind::Connection,
            "the database is unavailable or restarting; retry later",
        ));
    }
    None
}

/// A statement the tables, the schema, the role's privileges or the server's features refused.
fn refused_by_schema(code: &SqlState) -> Option<(ErrorKind, &'static str)> {
    if *code == SqlState::UNDEFINED_TABLE {
        return Some((
            ErrorKind::Database,
            "if the table was never created, call create_table() or pgtenure::migrate() at \
             startup; otherwise check the table name and the role's search_path",
        ));
    }
    if *code == SqlState::INVALID_SCHEMA_NAME {
        return Some((
            ErrorKind::Database,
            "create the schema, or name one that exists",
        ));
    }
    if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        return Some((
            ErrorKind::Database,
            "grant the role the privilege it names, or create the tables with a role that has it",
        ));
    }
    // A prepared statement whose table changed shape under it (altered, or dropped and created
    // again) is also refused with 0A000 ("cached plan must not change result type"), but the
    // statement layer never reports that one: it prepares the statement afresh, then sends it
    // unprepared. So this one was refused as a statement planned for the call.
    if *code == SqlState::FEATURE_NOT_SUPPORTED {
        return Some((
            ErrorKind::Database,
            "the server does not support something the statement uses; if it refuses a WAL \
             function (pg_current_wal_lsn, as Aurora does), turn off timeline-folded tokens with \
             Db::with_timeline_tokens(false)",
        ));
    }
    if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        return Some((
            ErrorKind::Database,
            "the server or the role is read-only (a standby?); connect to the primary",
        ));
    }
    if *code == SqlState::UNDEFINED_COLUMN {
        return Some((
            ErrorKind::Database,
            "the table lacks a column pgtenure needs (made by an earlier version?): run the \
             migrations (pgtenure::migrate or `pgtenure migrate`; see docs/upgrading.md)",
        ));
    }
    // A statement that worked on the tables pgtenure makes: a column of another type makes an
    // operator or function it applies to that column missing (hashint8(numeric), 42883) or its
    // result of the wrong type (42804).
    if *code == SqlState::UNDEFINED_FUNCTION || *code == SqlState::DATATYPE_MISMATCH {
        return Some((
            ErrorKind::Database,
            "a column is of another type than pgtenure makes it (a DBA's ALTER TABLE, a table \
             of another version): run the migrations (pgtenure::migrate or `pgtenure migrate`; see \
             docs/upgrading.md) or undo the change to the table; if the server lacks a WAL \
             function (pg_current_wal_lsn), turn off \
             timeline-folded tokens with Db::with_timeline_tokens(false)",
        ));
    }
    None
}
