//! The connection pool every primitive shares.

use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::types::Type;
use postgres::{NoTls, Row};
use r2d2::{Pool, PooledConnection};
use r2d2_postgres::PostgresConnectionManager;

use crate::error::{Error, ErrorKind, Result};
use crate::statement::{Failure, Statement, Value};
use crate::table_name::TableName;

type Manager = PostgresConnectionManager<NoTls>;

const LOCK_SQL: &str = include_str!("../sql/schema/lock.sql");
const DISCARD_SQL: &str = include_str!("../sql/schema/discard.sql");
const EXISTS_SQL: &str = include_str!("../sql/schema/table_exists.sql");
const COMPANION_SQL: &str = include_str!("../sql/schema/companion.sql");

/// The transaction-level advisory lock key every pgtenure `create_table` takes ("pgtenure" in ASCII).
const DDL_LOCK_KEY: i64 = 0x7067_7465_6e75_7265;

const DEFAULT_MAX_SIZE: u32 = 16;
const DEFAULT_POOL_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The driver's default keepalive idle time (two hours), which pgtenure shortens.
const DRIVER_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);
const KEEPALIVES_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVES_RETRIES: u32 = 2;
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
/// Startup option that pins pgtenure's own sessions to READ COMMITTED, whatever the database's or
/// role's default (a space inside an option value is escaped with a backslash).
const READ_COMMITTED_OPTION: &str = "-c default_transaction_isolation=read\\ committed";

/// A pool of PostgreSQL connections shared by every pgtenure primitive.
///
/// Cheap to clone (clones share the pool), `Send` and `Sync`. Every operation takes a connection for
/// one statement and returns it before doing anything else, so a pool of a few connections serves
/// many threads.
///
/// # Blocking
///
/// Every call that touches the database blocks the calling thread: at most the pool's connection
/// timeout (10 s by default) to get a connection, then one round trip. A dead network fails the call
/// after the TCP user timeout (20 s) instead of hanging. Do not call pgtenure from inside an async
/// runtime's worker thread; use `spawn_blocking` or a thread of your own.
#[derive(Clone)]
pub struct Db {
    pool: Pool<Manager>,
    cancel_on_deadline: bool,
    prepared_statements: bool,
}

impl Db {
    /// Connects to the database at `url` with pgtenure's defaults.
    ///
    /// `url` is a `postgres://` URL or a `key=value` connection string. Unless the string sets them,
    /// pgtenure sets `application_name=pgtenure`, a 5 s connect timeout, TCP keepalives (idle 10 s,
    /// interval 5 s, 2 retries) and a 20 s TCP user timeout, so a dead network fails a call instead
    /// of hanging it. It also pins its sessions to READ COMMITTED with the startup option
    /// `-c default_transaction_isolation=read\ committed` (turn it off with
    /// [`DbBuilder::read_committed`] behind a pooler that rejects `options`). The pool holds up to 16
    /// connections and does not run a health check on checkout (that would cost a round trip per
    /// operation; a broken connection is found by its failed statement and dropped).
    ///
    /// Waits until one connection is open, so a wrong URL fails here.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `url` does not parse;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no connection could be opened
    /// within the pool's connection timeout (10 s).
    pub fn connect(url: &str) -> Result<Db> {
        Db::builder(url)?.build()
    }

    /// A builder with pgtenure's defaults, to change the pool size, timeouts or the isolation option.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `url` does not parse.
    pub fn builder(url: &str) -> Result<DbBuilder> {
        let config = url.parse::<postgres::Config>().map_err(|e| {
            Error::invalid_input("database URL does not parse as a PostgreSQL connection string")
                .with_source(e)
        })?;
        Ok(DbBuilder::from_config(config))
    }

    /// Uses a pool you built yourself.
    ///
    /// Build it with `test_on_check_out(false)`: r2d2's default health check costs one extra round
    /// trip for every operation. pgtenure does not change the pool's sessions, so they keep the
    /// server's default isolation: under a `REPEATABLE READ` or `SERIALIZABLE` default, contended
    /// operations can fail with [`ErrorKind::Serialization`](crate::ErrorKind::Serialization)
    /// (never granting two holders); pass `options=-c default_transaction_isolation=read\ committed`
    /// in the connection string to avoid that.
    pub fn from_pool(pool: Pool<Manager>) -> Db {
        Db {
            pool,
            cancel_on_deadline: true,
            prepared_statements: true,
        }
    }

    /// Whether each statement is prepared once per server connection (SQL `PREPARE` under a name
    /// derived from its text, then `EXECUTE` in one round trip) instead of being parsed and planned
    /// on every call. Defaults to `true`.
    ///
    /// Safe behind PgBouncer in transaction mode with its default configuration: a name means the
    /// same statement on every server connection, and a server connection that lacks it is detected
    /// before anything runs (then it is prepared there, costing two more round trips once per
    /// server connection and statement). Turn it off behind a proxy that pins a client to one
    /// server session once it sees `PREPARE` (Amazon RDS Proxy does), and behind PgBouncer with
    /// `server_reset_query_always = 1` (every transaction starts without prepared statements, so
    /// each operation would prepare in vain before running unprepared).
    ///
    /// The names (`pgt_` and 32 hex digits of the statement's SHA-256) are not secret: a client
    /// that shares the database role and the pooler's server connections could prepare a forged
    /// statement under one. Such a client can already write pgtenure's tables; give pgtenure a role
    /// of its own where that matters.
    pub fn with_prepared_statements(mut self, on: bool) -> Db {
        self.prepared_statements = on;
        self
    }

    /// See [`Db::with_prepared_statements`].
    pub fn prepares_statements(&self) -> bool {
        self.prepared_statements
    }

    /// Whether a lease's statement that is still blocked at its local deadline is cancelled with the
    /// connection's cancel key (so its thread returns at once). Defaults to `true`.
    ///
    /// Turn it off behind PgBouncer or another transaction pooler: there a cancel request can be
    /// delayed and then hit another client's statement on the same server connection (PgBouncer
    /// issues #245 and #684; PgBouncer 1.18 here ignored the cancel outright). Loss is still signalled
    /// at the deadline either way; only the stuck thread then waits for its statement or the TCP
    /// timeout, and `Lease::release`/`Drop` still return within their bounds.
    pub fn with_cancel_on_deadline(mut self, on: bool) -> Db {
        self.cancel_on_deadline = on;
        self
    }

    /// See [`Db::with_cancel_on_deadline`].
    pub fn cancels_on_deadline(&self) -> bool {
        self.cancel_on_deadline
    }

    /// The underlying r2d2 pool.
    pub fn pool(&self) -> &Pool<Manager> {
        &self.pool
    }

    /// Takes a connection for one statement, waiting at most the pool's connection timeout, or
    /// until `until` when that comes first.
    pub(crate) fn conn_until(&self, context: &str, until: Option<Instant>) -> Result<Conn> {
        let wait = match until {
            None => self.pool.connection_timeout(),
            Some(until) => until
                .saturating_duration_since(Instant::now())
                .min(self.pool.connection_timeout()),
        };
        if wait.is_zero() {
            // Not a pool timeout: nothing was waited for (so it says nothing about an outage).
            return self.pool.try_get().ok_or_else(|| {
                Error::new(
                    ErrorKind::Connection,
                    format!(
                        "{context} failed: no idle database connection in the pool, and no time \
                     left to wait for one"
                    ),
                )
            });
        }
        self.pool
            .get_timeout(wait)
            .map_err(|e| Error::from_pool(context, e))
    }

    /// Runs `statement` on a pooled connection, sending it again on another connection only when
    /// that is safe (invariant 9 of the design: an unknown outcome is not "never ran").
    ///
    /// A pooled connection whose server session ended while it sat idle (a terminated backend, an
    /// idle-session timeout, a restarted server) answers the next statement with the server's
    /// `FATAL` report (57P01, 57P05) without running it: that connection is discarded and the
    /// statement sent at once on another, up to the pool's size. A connection that the driver
    /// already knows is closed is skipped before anything is sent. Any other failure after sending
    /// (the connection closed or reset, possibly after the server committed) is an unknown outcome:
    /// it is returned, unless `policy` says the statement is idempotent by construction, in which
    /// case it is sent once more to find out.
    pub(crate) fn with_conn<T>(
        &self,
        context: &str,
        policy: Policy,
        mut statement: impl FnMut(&mut Conn) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let skips = self.pool.max_size().clamp(1, MAX_STALE_SKIPS);
        let (mut skipped, mut resent) = (0, false);
        loop {
            let mut conn = self.conn_until(context, policy.until)?;
            if conn.is_closed() {
                // Nothing was sent; dropping it makes r2d2 discard it.
                skipped += 1;
                if skipped > skips {
                    return Err(Error::new(
                        ErrorKind::Connection,
                        format!("{context} failed: every pooled connection was closed"),
                    ));
                }
                continue;
            }
            match statement(&mut conn) {
                Ok(value) => return Ok(value),
                // Also a connection that broke while the statement was being prepared: the
                // operation itself was never sent.
                Err(Failure {
                    error,
                    before_sending,
                }) if never_ran(&error) || (before_sending && connection_lost(&error)) => {
                    discard(&mut conn);
                    skipped += 1;
                    if skipped > skips {
                        return Err(Error::from_postgres(context, error));
                    }
                    log::debug!(target: "pgtenure::db", "{context}: the pooled connection's session had ended ({error}); using another");
                }
                Err(Failure { error, .. })
                    if outcome_unknown(&error)
                        && policy.resend == Resend::Idempotent
                        && !resent =>
                {
                    resent = true;
                    log::info!(target: "pgtenure::db", "{context}: the connection failed after the statement was sent ({error}); sending it again to find out (it is idempotent)");
                }
                Err(Failure { error, .. }) => return Err(Error::from_postgres(context, error)),
            }
        }
    }

    /// Runs one statement in its own implicit transaction, in one round trip, returning its rows.
    /// `policy` says whether it may be sent again when its outcome is unknown: [`Policy::ONCE`]
    /// unless the statement is idempotent by construction (reads, renewals keyed by token, claims
    /// keyed by their call id), then [`Policy::IDEMPOTENT`].
    pub(crate) fn query(
        &self,
        context: &str,
        policy: Policy,
        statement: &Statement,
        values: &[Value<'_>],
    ) -> Result<Vec<Row>> {
        self.with_conn(context, policy, |conn| self.run(conn, statement, values))
    }

    /// Like [`Db::query`] for a statement that returns exactly one row.
    pub(crate) fn query_one(
        &self,
        context: &str,
        policy: Policy,
        statement: &Statement,
        values: &[Value<'_>],
    ) -> Result<Row> {
        one_row(context, self.query(context, policy, statement, values)?)
    }

    /// Runs `statement` once on `conn` (inside [`Db::with_conn`]): prepared once per server
    /// connection unless turned off (see [`Db::with_prepared_statements`]).
    pub(crate) fn run(
        &self,
        conn: &mut Conn,
        statement: &Statement,
        values: &[Value<'_>],
    ) -> std::result::Result<Vec<Row>, Failure> {
        statement.query(conn, self.prepared_statements, values)
    }

    /// Prepares `statement` on `conn` if it is not known to be there, without running it (see
    /// [`Statement::prepare`]).
    pub(crate) fn prepare(
        &self,
        conn: &mut Conn,
        statement: &Statement,
    ) -> std::result::Result<(), Failure> {
        statement.prepare(conn, self.prepared_statements)
    }

    /// Creates a table and its companions (`ddl`, one statement each) unless `table` exists, under a
    /// transaction-level advisory lock so that every instance may call it at once: concurrent
    /// `CREATE TABLE IF NOT EXISTS` statements can otherwise fail on PostgreSQL's catalog. An
    /// existing table is left as it is, and then the role needs no `CREATE` privilege.
    ///
    /// Then checks that every companion in `expected` is what the statements need: `IF NOT EXISTS`
    /// skips an index or a sequence whose name another relation already has, so a name taken by a
    /// table (or a companion dropped by hand) would otherwise go unnoticed until it costs a scan or a
    /// failed `nextval`.
    pub(crate) fn create_table(
        &self,
        context: &str,
        table: &TableName,
        ddl: &[String],
        expected: &[Companion],
    ) -> Result<()> {
        let fail = |e| Error::from_postgres(context, e);
        let mut conn = self.conn_until(context, None)?;
        let mut tx = conn.transaction().map_err(fail)?;
        tx.query_typed(LOCK_SQL, &[(&DDL_LOCK_KEY, Type::INT8)])
            .map_err(fail)?;
        let quoted = table.quoted();
        let exists: bool = tx
            .query_typed_one(EXISTS_SQL, &[(&quoted, Type::TEXT)])
            .map_err(fail)?
            .get(0);
        if exists {
            log::debug!(target: "pgtenure::db", "{context}: table {table} exists");
        } else {
            for statement in ddl {
                tx.batch_execute(statement).map_err(fail)?;
            }
        }
        for companion in expected {
            let rows = tx
                .query_typed(
                    COMPANION_SQL,
                    &[(&companion.name, Type::TEXT), (&quoted, Type::TEXT)],
                )
                .map_err(fail)?;
            let found = rows
                .first()
                .map(|row| (row.get::<_, String>("kind"), row.get::<_, bool>("on_table")));
            let ok = match (companion.kind, &found) {
                (CompanionKind::Index, Some((kind, on_table))) => kind == "i" && *on_table,
                (CompanionKind::Sequence, Some((kind, _))) => kind == "S",
                (_, None) => false,
            };
            if !ok {
                let what = companion.kind.noun();
                let problem = match found {
                    Some(_) => format!(
                        "the name is taken by another relation, so the {what} was not created"
                    ),
                    None => format!(
                        "the {what} does not exist (dropped, or the table was made by hand)"
                    ),
                };
                return Err(Error::new(
                    ErrorKind::Database,
                    format!(
                        "{context} failed: {table} needs the {what} {} but {problem}; choose table \
                         names whose derived names are free, or create the {what} as sql/ describes",
                        companion.name
                    ),
                ));
            }
        }
        tx.commit().map_err(fail)?;
        if !exists {
            log::info!(target: "pgtenure::db", "{context}: created table {table}");
        }
        Ok(())
    }
}

/// An index or sequence a table's statements rely on, by its quoted, schema-qualified name.
#[derive(Debug, Clone)]
pub(crate) struct Companion {
    pub(crate) name: String,
    pub(crate) kind: CompanionKind,
}

/// What a [`Companion`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompanionKind {
    /// An index on the table.
    Index,
    /// A sequence the statements draw tokens from.
    Sequence,
}

impl CompanionKind {
    fn noun(self) -> &'static str {
        match self {
            CompanionKind::Index => "index",
            CompanionKind::Sequence => "sequence",
        }
    }
}

impl Companion {
    pub(crate) fn index(name: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Index,
        }
    }

    pub(crate) fn sequence(name: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Sequence,
        }
    }
}

/// The most dead pooled connections one operation skips before it reports the failure.
const MAX_STALE_SKIPS: u32 = 16;

/// How long poking a dead connection may take (the server has closed it: it fails at once).
const POKE_TIMEOUT: Duration = Duration::from_millis(250);

/// A pooled connection.
pub(crate) type Conn = PooledConnection<Manager>;

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

/// The only row of a statement that always returns one.
pub(crate) fn one_row(context: &str, mut rows: Vec<Row>) -> Result<Row> {
    match rows.len() {
        1 => Ok(rows.remove(0)),
        n => Err(Error::new(
            ErrorKind::Database,
            format!(
                "{context} failed: its statement returned {n} rows instead of one; check that the \
                 table was made by pgtenure's create_table"
            ),
        )),
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

/// Whether a failure says the connection or its server session is gone (closed, reset, a crash
/// shutdown 57P02, a connection exception of class 08 such as a pooler's "server conn crashed"),
/// rather than that the server refused the statement.
fn connection_lost(e: &postgres::Error) -> bool {
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

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("Db")
            .field("cancel_on_deadline", &self.cancel_on_deadline)
            .field("prepared_statements", &self.prepared_statements)
            .field("max_size", &self.pool.max_size())
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}

/// Builds a [`Db`]; every setter's default is pgtenure's (see [`Db::connect`]).
pub struct DbBuilder {
    config: postgres::Config,
    max_size: u32,
    connection_timeout: Duration,
    read_committed: bool,
    cancel_on_deadline: bool,
    prepared_statements: bool,
}

impl DbBuilder {
    /// Starts from a driver configuration you built; pgtenure's connection defaults are applied to
    /// whatever it leaves unset.
    pub fn from_config(config: postgres::Config) -> DbBuilder {
        DbBuilder {
            config,
            max_size: DEFAULT_MAX_SIZE,
            connection_timeout: DEFAULT_POOL_TIMEOUT,
            read_committed: true,
            cancel_on_deadline: true,
            prepared_statements: true,
        }
    }

    /// The most connections the pool opens. Defaults to 16.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `max_size` is zero.
    pub fn max_size(mut self, max_size: u32) -> Result<DbBuilder> {
        if max_size == 0 {
            return Err(Error::invalid_input(
                "pool max_size is zero; it must be at least 1",
            ));
        }
        self.max_size = max_size;
        Ok(self)
    }

    /// How long getting a connection from the pool may wait (also bounds [`DbBuilder::build`]).
    /// Defaults to 10 s.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is zero.
    pub fn connection_timeout(mut self, timeout: Duration) -> Result<DbBuilder> {
        if timeout.is_zero() {
            return Err(Error::invalid_input("pool connection_timeout is zero"));
        }
        self.connection_timeout = timeout;
        Ok(self)
    }

    /// Whether to pin pgtenure's sessions to READ COMMITTED with a startup `options` parameter.
    /// Defaults to `true`. Turn it off behind PgBouncer unless its `ignore_startup_parameters`
    /// lists `options`; then the server's default isolation applies (see [`Db::from_pool`]).
    pub fn read_committed(mut self, on: bool) -> DbBuilder {
        self.read_committed = on;
        self
    }

    /// Whether stuck lease statements are cancelled at their deadline; see
    /// [`Db::with_cancel_on_deadline`]. Defaults to `true`; turn it off behind PgBouncer.
    pub fn cancel_on_deadline(mut self, on: bool) -> DbBuilder {
        self.cancel_on_deadline = on;
        self
    }

    /// Whether statements are prepared once per server connection; see
    /// [`Db::with_prepared_statements`]. Defaults to `true`.
    pub fn prepared_statements(mut self, on: bool) -> DbBuilder {
        self.prepared_statements = on;
        self
    }

    /// Builds the pool and waits until one connection is open.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no connection could be opened
    /// within the connection timeout.
    pub fn build(self) -> Result<Db> {
        let builder = self.pool_builder().min_idle(Some(1));
        let pool = builder
            .build(PostgresConnectionManager::new(
                self.effective_config(),
                NoTls,
            ))
            .map_err(|e| Error::from_pool("connect", e))?;
        Ok(Db::from_pool(pool)
            .with_cancel_on_deadline(self.cancel_on_deadline)
            .with_prepared_statements(self.prepared_statements))
    }

    /// Builds the pool without connecting: the first operation opens the first connection. Use it
    /// for a process that must start while the database is still unreachable.
    pub fn build_lazy(self) -> Db {
        let builder = self.pool_builder().min_idle(Some(0));
        let pool = builder.build_unchecked(PostgresConnectionManager::new(
            self.effective_config(),
            NoTls,
        ));
        Db::from_pool(pool)
            .with_cancel_on_deadline(self.cancel_on_deadline)
            .with_prepared_statements(self.prepared_statements)
    }

    fn pool_builder(&self) -> r2d2::Builder<Manager> {
        Pool::builder()
            .max_size(self.max_size)
            .connection_timeout(self.connection_timeout)
            .test_on_check_out(false)
    }

    fn effective_config(&self) -> postgres::Config {
        let mut config = self.config.clone();
        if config.get_application_name().is_none() {
            config.application_name("pgtenure");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if config.get_keepalives() {
            if config.get_keepalives_idle() == DRIVER_KEEPALIVES_IDLE {
                config.keepalives_idle(KEEPALIVES_IDLE);
            }
            if config.get_keepalives_interval().is_none() {
                config.keepalives_interval(KEEPALIVES_INTERVAL);
            }
            if config.get_keepalives_retries().is_none() {
                config.keepalives_retries(KEEPALIVES_RETRIES);
            }
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if self.read_committed {
            let options = match config.get_options() {
                Some(existing) if !existing.trim().is_empty() => {
                    format!("{existing} {READ_COMMITTED_OPTION}")
                }
                _ => READ_COMMITTED_OPTION.to_owned(),
            };
            config.options(&options);
        }
        config
    }
}

impl fmt::Debug for DbBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The driver config's Debug hides the password.
        f.debug_struct("DbBuilder")
            .field("config", &self.config)
            .field("max_size", &self.max_size)
            .field("connection_timeout", &self.connection_timeout)
            .field("read_committed", &self.read_committed)
            .field("cancel_on_deadline", &self.cancel_on_deadline)
            .field("prepared_statements", &self.prepared_statements)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_only_what_the_url_leaves_unset() {
        let builder = Db::builder("postgres://u@db.example:5433/app").unwrap();
        let config = builder.effective_config();
        assert_eq!(config.get_application_name(), Some("pgtenure"));
        assert_eq!(config.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(config.get_tcp_user_timeout(), Some(&TCP_USER_TIMEOUT));
        assert_eq!(config.get_keepalives_idle(), KEEPALIVES_IDLE);
        assert_eq!(config.get_options(), Some(READ_COMMITTED_OPTION));

        let own = Db::builder(
            "host=h user=u application_name=mine connect_timeout=2 options='-c work_mem=8MB'",
        )
        .unwrap()
        .read_committed(true);
        let config = own.effective_config();
        assert_eq!(config.get_application_name(), Some("mine"));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(
            config.get_options(),
            Some("-c work_mem=8MB -c default_transaction_isolation=read\\ committed")
        );

        let off = Db::builder("host=h")
            .unwrap()
            .read_committed(false)
            .effective_config();
        assert_eq!(off.get_options(), None);
    }

    #[test]
    fn bad_builder_input_is_refused() {
        assert!(Db::builder("postgres://[::1")
            .unwrap_err()
            .is_invalid_input());
        let b = Db::builder("host=h").unwrap();
        assert!(b.max_size(0).unwrap_err().is_invalid_input());
        let b = Db::builder("host=h").unwrap();
        assert!(b
            .connection_timeout(Duration::ZERO)
            .unwrap_err()
            .is_invalid_input());
    }

    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync + Clone>() {}
        check::<Db>();
    }
}
