//! The connection pool every primitive shares.

use std::fmt;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{NoTls, Row};
use r2d2::{Pool, PooledConnection};
use r2d2_postgres::PostgresConnectionManager;

use crate::error::{Error, Result};
use crate::ident::TableName;

type Manager = PostgresConnectionManager<NoTls>;

/// A typed bind parameter: the value and its PostgreSQL type, so that no prepare round trip is needed.
pub(crate) type Param<'a> = (&'a (dyn ToSql + Sync), Type);

const LOCK_SQL: &str = include_str!("../sql/schema/lock.sql");
const EXISTS_SQL: &str = include_str!("../sql/schema/table_exists.sql");

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
        }
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

    /// Takes a connection for one statement.
    pub(crate) fn conn(&self, context: &str) -> Result<PooledConnection<Manager>> {
        self.pool.get().map_err(|e| Error::from_pool(context, e))
    }

    /// Runs `statement` on a pooled connection, skipping connections that were already dead.
    ///
    /// A pooled connection whose server session ended while it sat idle (a terminated backend, a
    /// restarted server) fails its next statement before running it. The driver may not have seen the
    /// socket close yet, so r2d2 would keep the connection; [`discard_if_dead`] makes the driver
    /// notice, so r2d2 drops it, and the statement is sent again at once on another connection.
    /// After a restart every idle connection is dead: this costs a failed write each, instead of a
    /// retry interval each. Failures that may have run the statement are returned, never retried.
    pub(crate) fn with_conn<T>(
        &self,
        context: &str,
        mut statement: impl FnMut(&mut postgres::Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let attempts = self.pool.max_size().clamp(1, MAX_STALE_SKIPS) + 1;
        let mut attempt = 1;
        loop {
            let mut conn = self.conn(context)?;
            match statement(&mut conn) {
                Ok(value) => return Ok(value),
                Err(e) if never_ran(&e) => {
                    discard_if_dead(&mut conn);
                    if attempt == attempts {
                        return Err(Error::from_postgres(context, e));
                    }
                    log::debug!(target: "pgtenure::db", "{context}: pooled connection was dead ({e}); using another");
                    attempt += 1;
                }
                Err(e) => return Err(Error::from_postgres(context, e)),
            }
        }
    }

    /// Runs one statement in its own implicit transaction, in one round trip, returning its rows.
    pub(crate) fn query(&self, context: &str, sql: &str, params: &[Param<'_>]) -> Result<Vec<Row>> {
        self.with_conn(context, |conn| conn.query_typed(sql, params))
    }

    /// Like [`Db::query`] for a statement that returns exactly one row.
    pub(crate) fn query_one(&self, context: &str, sql: &str, params: &[Param<'_>]) -> Result<Row> {
        self.with_conn(context, |conn| conn.query_typed_one(sql, params))
    }

    /// Creates a table and its companions (`ddl`, one statement each) unless `table` exists, under a
    /// transaction-level advisory lock so that every instance may call it at once: concurrent
    /// `CREATE TABLE IF NOT EXISTS` statements can otherwise fail on PostgreSQL's catalog. An
    /// existing table is left as it is, and then the role needs no `CREATE` privilege.
    pub(crate) fn create_table(
        &self,
        context: &str,
        table: &TableName,
        ddl: &[String],
    ) -> Result<()> {
        let fail = |e| Error::from_postgres(context, e);
        let mut conn = self.conn(context)?;
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
            return Ok(());
        }
        for statement in ddl {
            tx.batch_execute(statement).map_err(fail)?;
        }
        tx.commit().map_err(fail)?;
        log::info!(target: "pgtenure::db", "{context}: created table {table}");
        Ok(())
    }
}

/// The most dead pooled connections one operation skips before it reports the failure.
const MAX_STALE_SKIPS: u32 = 16;

/// How long poking a dead connection may take (the server has closed it: it fails at once).
const POKE_TIMEOUT: Duration = Duration::from_millis(250);

/// Whether a failure proves the statement never ran: the connection was closed before it was sent,
/// or the server's only answer was that the session had been ended (terminated by an administrator,
/// a crash or shutdown of the server, a server not accepting connections yet). A session ended while
/// the statement ran rolls it back, so it did not take effect either.
fn never_ran(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    e.as_db_error().is_some_and(|db| {
        let code = db.code();
        *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
    })
}

/// Makes the driver notice a connection whose session the server ended, so that r2d2, which asks the
/// driver whether the connection is closed when it is returned, drops it instead of reusing it.
fn discard_if_dead(conn: &mut postgres::Client) {
    if !conn.is_closed() {
        // The server closed the socket after its last message, so the poke fails at once.
        let _ = conn.is_valid(POKE_TIMEOUT);
    }
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("Db")
            .field("cancel_on_deadline", &self.cancel_on_deadline)
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
        Ok(Db::from_pool(pool).with_cancel_on_deadline(self.cancel_on_deadline))
    }

    /// Builds the pool without connecting: the first operation opens the first connection. Use it
    /// for a process that must start while the database is still unreachable.
    pub fn build_lazy(self) -> Db {
        let builder = self.pool_builder().min_idle(Some(0));
        let pool = builder.build_unchecked(PostgresConnectionManager::new(
            self.effective_config(),
            NoTls,
        ));
        Db::from_pool(pool).with_cancel_on_deadline(self.cancel_on_deadline)
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
