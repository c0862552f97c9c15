//! The crate's one error type.
//!
//! [`Error`] is opaque: branch on [`Error::kind`] (or the predicates such as
//! [`Error::is_invalid_input`]), read the SQLSTATE with [`Error::code`], and follow the cause through
//! [`std::error::Error::source`]. Database errors are classified by SQLSTATE, never by message text.

use std::error::Error as StdError;
use std::fmt;

use postgres::error::{DbError, SqlState};

pub(crate) mod classify;

use crate::observe;

/// What went wrong, broadly enough to decide what to do about it.
///
/// New kinds may be added in minor releases, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller passed a value the library refuses (a blank or over-long key, a NUL byte, a
    /// duration out of range, a table name that is not a plain identifier, a tick too far ahead of
    /// the database clock). Nothing was stored. Retrying the same call fails the same way.
    InvalidInput,
    /// The database could not be reached or the connection broke: the pool timed out, a connection
    /// was refused or reset, the server is shutting down or restarting. The operation may or may
    /// not have taken effect; retrying later is reasonable.
    Connection,
    /// The statement was cancelled before it finished (SQLSTATE 57014): the server's
    /// `statement_timeout` (set for the role, the database or the connection) ran out, someone
    /// cancelled the backend, or pgtenure itself cancelled it (a lease's statement still running at
    /// the lease's local deadline, or a release past its bound). `Display` says which it was when
    /// pgtenure sent the cancel. The statement did not take effect (its transaction rolled back);
    /// retrying later is reasonable.
    ///
    /// Also a migration that found its table locked by other transactions for a minute (each
    /// attempt waits for the lock 100 ms at most, so that running instances do not queue behind
    /// it): nothing was changed; end the long transactions and migrate again.
    Timeout,
    /// The statement failed because of a serialization failure or a deadlock, which happens when the
    /// database's or role's default isolation is `REPEATABLE READ` or `SERIALIZABLE` and callers race.
    /// Nothing was changed; retrying is safe.
    Serialization,
    /// The database refused the statement for another reason (a missing table, missing privileges,
    /// a constraint violation, an unexpected result). Usually needs an operator or a code change.
    ///
    /// Also an answer pgtenure cannot read: a column of another type than its statements expect, a
    /// column missing from the answer, or a NULL where a value is expected (a DBA's `ALTER TABLE`,
    /// a migration gone wrong, another version's table in a rolling upgrade). `Display` then names
    /// the operation, the table, the column, the type found (or `NULL`, or missing) and the type
    /// expected, with the advice to run the migrations or undo the change; the driver's error is
    /// the `source()`. Such a statement did run: a grant, claim, renewal or release whose answer
    /// could not be read may have been stored (a grant or claim then lapses at its TTL, nobody
    /// renewing it), and the caller gets this error, never a panic.
    Database,
    /// The environment could not be prepared: the PostgreSQL server binaries are missing, a
    /// temporary directory could not be made, a throwaway server did not start.
    Setup,
    /// A table's schema version does not fit this pgtenure: a handle's table is older than its
    /// statements need (run [`migrate`](crate::migrate) or `pgtenure migrate`), or
    /// [`migrate`](crate::migrate) found a table migrated by a newer pgtenure (upgrade pgtenure;
    /// nothing was changed), or a table recorded as another kind of pgtenure table. `Display`
    /// names the table, the version found and the one needed. Permanent: waiting does not fix it.
    /// See `docs/upgrading.md`.
    Schema,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::Connection => "connection error",
            ErrorKind::Timeout => "statement cancelled",
            ErrorKind::Serialization => "serialization failure",
            ErrorKind::Database => "database error",
            ErrorKind::Setup => "setup error",
            ErrorKind::Schema => "schema version mismatch",
        })
    }
}

type Source = Box<dyn StdError + Send + Sync + 'static>;

struct Inner {
    kind: ErrorKind,
    message: String,
    source: Option<Source>,
    /// The statement was sent and the connection failed before its answer: it may have run.
    outcome_unknown: bool,
    /// No connection could be had from the pool: nothing was sent.
    checkout: bool,
}

/// The error of every fallible pgtenure call.
///
/// `Display` says what happened and what to do, in lowercase with no trailing period; the
/// underlying cause (a [`postgres::Error`](https://docs.rs/postgres/0.19/postgres/struct.Error.html), an [`r2d2::Error`], an I/O error) is in `source()`.
pub struct Error {
    inner: Box<Inner>,
}

/// `Result` with pgtenure's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                source: None,
                outcome_unknown: false,
                checkout: false,
            }),
        }
    }

    pub(crate) fn with_source(mut self, source: impl Into<Source>) -> Error {
        self.inner.source = Some(source.into());
        self
    }

    pub(crate) fn invalid_input(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidInput, message)
    }

    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn setup(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Setup, message)
    }

    /// Classifies a driver error, `context` saying what the library was doing ("claim tick").
    /// `Display` reads "{context} failed: {the server's message} ({SQLSTATE}); {advice}", or with
    /// the driver's own words where the server said nothing.
    pub(crate) fn from_postgres(context: &str, err: postgres::Error) -> Error {
        observe::statement_error(match err.code() {
            Some(code) => code.code().get(..2).unwrap_or("??"),
            None if classify::broke(&err) => "connection",
            None => "driver",
        });
        let (kind, reason, advice) = match err.as_db_error() {
            Some(db) => {
                let (kind, advice) = classify::classify_db_error(db);
                (
                    kind,
                    format!("{} ({})", db.message(), db.code().code()),
                    advice,
                )
            }
            // No server error: the connection broke, timed out, or a value did not convert.
            None if classify::broke(&err) => (
                ErrorKind::Connection,
                driver_reason(&err),
                "retry once the database is reachable",
            ),
            None => (
                ErrorKind::Database,
                driver_reason(&err),
                "the driver refused the statement or its result",
            ),
        };
        let unknown = classify::outcome_unknown(&err);
        let advice = if unknown {
            format!("{advice} (the statement was sent, so it may have taken effect)")
        } else {
            advice.to_owned()
        };
        let mut error =
            Error::new(kind, format!("{context} failed: {reason}; {advice}")).with_source(err);
        error.inner.outcome_unknown = unknown;
        error
    }

    /// Classifies a Diesel error from a statement pgtenure ran on the caller's Diesel connection (a
    /// fence), `context` saying what it was. Diesel 2.2 and 2.3 give the server's message and a
    /// coarse kind, not the SQLSTATE: the kind is chosen from Diesel's, never from the text.
    #[cfg(feature = "diesel")]
    pub(crate) fn from_diesel(context: &str, err: diesel::result::Error) -> Error {
        use diesel::result::{DatabaseErrorKind, Error as Diesel};

        let (kind, reason, advice) = match &err {
            Diesel::DatabaseError(db_kind, info) => {
                let mut reason = info.message().to_owned();
                if let Some(details) = info.details() {
                    reason.push_str(&format!(" ({details})"));
                }
                let (kind, advice) = match db_kind {
                    DatabaseErrorKind::SerializationFailure => (
                        ErrorKind::Serialization,
                        "the transaction's isolation level or a deadlock made the database refuse \
                         it; roll back and retry the whole transaction",
                    ),
                    DatabaseErrorKind::ClosedConnection => (
                        ErrorKind::Connection,
                        "the connection closed; the transaction did not commit, retry it once the \
                         database is reachable",
                    ),
                    _ => (
                        ErrorKind::Database,
                        "the database refused the fence statement; the transaction is aborted, \
                         roll it back (a missing table: call create_table() or pgtenure::migrate())",
                    ),
                };
                (kind, reason, advice)
            }
            Diesel::BrokenTransactionManager => (
                ErrorKind::Database,
                err.to_string(),
                "Diesel's transaction manager is broken: discard the connection",
            ),
            _ => (
                ErrorKind::Database,
                err.to_string(),
                "Diesel refused the statement or its result",
            ),
        };
        observe::statement_error(match kind {
            ErrorKind::Connection => "connection",
            ErrorKind::Serialization => "40",
            _ => "driver",
        });
        Error::new(kind, format!("{context} failed: {reason}; {advice}")).with_source(err)
    }

    /// A statement that pgtenure itself cancelled (`why`: when and what follows), answered 57014.
    pub(crate) fn cancelled_by_pgtenure(context: &str, why: &str, err: postgres::Error) -> Error {
        observe::statement_error("57");
        let reason = match err.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => driver_reason(&err),
        };
        Error::new(
            ErrorKind::Timeout,
            format!("{context} failed: {reason}; {why}"),
        )
        .with_source(err)
    }

    /// A pool checkout that waited and failed.
    pub(crate) fn checkout(message: impl Into<String>) -> Error {
        let mut error = Error::new(ErrorKind::Connection, message);
        error.inner.checkout = true;
        error
    }

    /// True when waiting for a pool connection failed (nothing was sent).
    pub(crate) fn is_pool_checkout(&self) -> bool {
        self.inner.checkout
    }

    /// A pool checkout that timed out or could not open a connection; r2d2's message says what its
    /// last attempt met, when it knows.
    pub(crate) fn from_pool(
        context: &str,
        err: r2d2::Error,
        last_attempt: Option<String>,
    ) -> Error {
        let text = match last_attempt {
            Some(cause) => format!(
                "{context} failed: no database connection could be had from the pool in time; \
                 the last attempt to connect: {cause}"
            ),
            None => format!(
                "{context} failed: no database connection could be had from the pool in time \
                 ({err})"
            ),
        };
        Error::checkout(text).with_source(err)
    }

    /// The kind of error, to decide what to do.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// True when the caller's input was refused before anything was stored.
    pub fn is_invalid_input(&self) -> bool {
        self.kind() == ErrorKind::InvalidInput
    }

    /// True when the database could not be reached or the connection broke.
    pub fn is_connection(&self) -> bool {
        self.kind() == ErrorKind::Connection
    }

    /// True when the statement was cancelled before it finished: a `statement_timeout`, or a
    /// cancel request (see [`ErrorKind::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }

    /// True when waiting cannot fix it (a missing table or privilege, refused credentials, bad
    /// input, a column of a type pgtenure does not expect): every kind but [`ErrorKind::Connection`], [`ErrorKind::Timeout`] and
    /// [`ErrorKind::Serialization`]. The loops (`Leaser::run`, `Elector::campaign`) end at startup
    /// on such an error instead of retrying it.
    pub fn is_permanent(&self) -> bool {
        !matches!(
            self.kind(),
            ErrorKind::Connection | ErrorKind::Timeout | ErrorKind::Serialization
        )
    }

    /// True for a serialization failure (non-default isolation under contention) or a deadlock that
    /// outlasted the resends; the statement did not take effect.
    pub fn is_serialization(&self) -> bool {
        self.kind() == ErrorKind::Serialization
    }

    /// True when the statement was sent and the connection failed before its answer arrived (closed,
    /// reset, or the server crashed while running it): it may have taken effect. pgtenure never sends
    /// such a statement again blindly; claims and acquires find out by sending again what is
    /// idempotent by construction, and report this error only when that failed too.
    pub fn is_outcome_unknown(&self) -> bool {
        self.inner.outcome_unknown
    }

    /// The server's error report, when the database itself refused the statement.
    pub fn as_db_error(&self) -> Option<&DbError> {
        self.inner
            .source
            .as_ref()
            .and_then(|s| s.downcast_ref::<postgres::Error>())
            .and_then(postgres::Error::as_db_error)
    }

    /// The SQLSTATE of the server's error report, if there is one.
    pub fn code(&self) -> Option<&SqlState> {
        self.as_db_error().map(DbError::code)
    }
}

/// The driver's own description of a failure with no server report, with its cause.
fn driver_reason(err: &postgres::Error) -> String {
    match StdError::source(err) {
        Some(cause) => format!("{err}: {cause}"),
        None => err.to_string(),
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind)
            .field("message", &self.inner.message);
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_ref()
            .map(|s| &**s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_static() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Error>();
    }

    #[test]
    fn display_is_the_message_and_source_is_kept() {
        let io = std::io::Error::other("boom");
        let err = Error::setup("could not start the server").with_source(io);
        assert_eq!(err.to_string(), "could not start the server");
        assert_eq!(err.kind(), ErrorKind::Setup);
        assert_eq!(StdError::source(&err).unwrap().to_string(), "boom");
        assert!(err.code().is_none());
    }

    #[test]
    fn predicates_follow_kind() {
        let err = Error::invalid_input("key is blank");
        assert!(err.is_invalid_input());
        assert!(!err.is_connection());
        assert!(!err.is_serialization());
    }
}
