//! The connection pool every primitive shares.

mod builder;
pub(crate) mod conn;
pub(crate) mod handover;
mod libpq;
mod outcome;
mod parking;
mod promotion;
mod records;
mod schema;
mod ssl;
#[cfg(feature = "tls")]
mod tls;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::tls::{MakeTlsConnect, TlsConnect};
use postgres::{NoTls, Row, Socket};
use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;

use crate::error::{Error, ErrorKind, Result};
use crate::observe;
use crate::statement::{Failure, Params, Sending, Statement};

pub use self::builder::DbBuilder;
use self::handover::registry::Handover;
pub use self::handover::Freed;
pub(crate) use self::outcome::{discard, Policy, Resend};
pub(crate) use self::promotion::{Grant, GrantAnswer, Preferring, PromotionRecord};
pub(crate) use self::records::Promotion;
use self::records::Promotions;
use self::schema::SchemaChecks;
pub use self::ssl::SslMode;
use crate::error::classify::{connection_lost, deadlocked, never_ran, outcome_unknown};

pub(crate) use self::conn::CancelKey;
pub use self::conn::Connection;
use self::conn::{Lending, Pooling, Source};
use crate::statement::Targets;
pub use crate::statement::{StatementMode, StatementModes};

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
    pool: Arc<dyn Source>,
    lending: Arc<Lending>,
    cancel_on_deadline: bool,
    /// How statements are sent ([`Db::with_statement_mode`]), and how they were.
    sending: Sending,
    /// Whether new fencing tokens fold in the server's timeline ([`Db::with_timeline_tokens`]).
    timeline_tokens: bool,
    /// Whether grants wait out a promotion ([`Db::with_promotion_hold_off`]).
    promotion_hold_off: bool,
    /// The promotion records read so far, by table.
    promotions: Arc<Promotions>,
    /// The tables whose schema versions were found good enough for the handles' statements.
    schemas: Arc<SchemaChecks>,
    /// The handover listener, when notifications are on ([`DbBuilder::handover_notifications`]).
    handover: Option<Arc<Handover>>,
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
    /// operation; a broken connection is found by its failed statement and dropped). Each thread
    /// keeps the connection its last statement ran on ([`DbBuilder::thread_affinity`]).
    ///
    /// What `url` leaves unset is taken from the environment as libpq takes it (a service file, the
    /// `PG*` variables, `~/.pgpass`; see [`Db::from_env`]): what `url` says always wins.
    ///
    /// TLS follows `sslmode`, `sslrootcert`, `sslcert` and `sslkey` in `url`, as with libpq (see
    /// [`SslMode`]; every mode that needs TLS needs the cargo feature `tls`). The default is `prefer`: TLS when the server
    /// offers it and the feature is on, the certificate unchecked. Use `verify-full` for a database
    /// reached over a network.
    ///
    /// Waits until one connection is open, so a wrong URL fails here.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) at once when `url` is empty, has
    /// another scheme than `postgres://` or `postgresql://`, does not parse, has an
    /// unknown `sslmode`, needs TLS without the feature `tls`, or names root certificates that
    /// cannot be read; [`ErrorKind::Database`](crate::ErrorKind::Database) at once, with the
    /// server's reason and SQLSTATE, when the server refuses what waiting cannot fix
    /// (authentication 28P01, an unknown role 28000, an unknown database 3D000), and with the
    /// driver's reason for a TLS refusal (a certificate that does not verify, a server without TLS
    /// under `require`) or a missing password;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no connection could be opened
    /// within the pool's connection timeout (10 s), saying why the first attempt failed.
    pub fn connect(url: &str) -> Result<Db> {
        Db::builder(url)?.build()
    }

    /// A builder with pgtenure's defaults, to change the pool size, timeouts, TLS or the isolation
    /// option.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) as for [`Db::connect`], for
    /// what can be told from `url` alone.
    pub fn builder(url: &str) -> Result<DbBuilder> {
        let url = url.trim();
        if url.is_empty() {
            return Err(Error::invalid_input(
                "the database URL is empty; give postgres://user@host:port/database, or use \
                 Db::from_env to connect as psql would with no arguments (PGHOST, PGSERVICE, ...)",
            ));
        }
        // Never the URL itself in a message: it may hold a password.
        if let Some((scheme, _)) = url.split_once("://") {
            if scheme != "postgres" && scheme != "postgresql" {
                return Err(Error::invalid_input(format!(
                    "the database URL's scheme is {scheme:?}; use postgres:// or postgresql://"
                )));
            }
        }
        Db::builder_with(url, &libpq::Process)
    }

    /// Connects as psql does when given no connection string: everything from the service file
    /// (`PGSERVICE`), the `PG*` environment variables (`PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
    /// `PGAPPNAME`, `PGCONNECT_TIMEOUT`, ...) and the password file (`PGPASSFILE` or
    /// `~/.pgpass`), else libpq's defaults (the local Unix socket, the login name as user and
    /// database). pgtenure's own defaults then apply as with [`Db::connect`]. See
    /// `docs/connections.md`.
    ///
    /// # Errors
    ///
    /// As [`Db::connect`]; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) also for a
    /// variable or service file value that does not parse (naming it) and for a service that no
    /// service file defines.
    pub fn from_env() -> Result<Db> {
        DbBuilder::from_env()?.build()
    }

    /// A builder from `url` (possibly empty), completed from `env` as libpq does.
    fn builder_with(url: &str, env: &dyn libpq::Environment) -> Result<DbBuilder> {
        let (mut url, mut params) = ssl::split(url)?;
        if let Some(port) = libpq::port_for_url(&params, env)? {
            url = ssl::with_port(&url, &port).unwrap_or(url);
        }
        let mut config = url.parse::<postgres::Config>().map_err(|e| {
            Error::invalid_input(format!(
                "the database URL does not parse ({e}); write postgres://user@host:port/database \
                 or key=value pairs such as \"host=db user=app dbname=app\""
            ))
            .with_source(e)
        })?;
        libpq::fill(&mut config, &mut params, env)?;
        let mut builder = DbBuilder::from_config(config);
        if let Some(mode) = params.mode {
            builder = builder.ssl_mode(mode)?;
        }
        if let Some(root_cert) = &params.root_cert {
            builder = builder.ssl_root_cert(root_cert)?;
        }
        builder = builder.client_files(params.cert, params.key)?;
        if let Some(mode) = params.statement_mode {
            builder = builder.statement_mode(mode);
        }
        Ok(builder)
    }

    /// Uses a pool you built yourself.
    ///
    /// Build it with `test_on_check_out(false)`: r2d2's default health check costs one extra round
    /// trip for every operation. pgtenure does not change the pool's sessions, so they keep the
    /// server's default isolation: under a `REPEATABLE READ` or `SERIALIZABLE` default, contended
    /// operations can fail with [`ErrorKind::Serialization`](crate::ErrorKind::Serialization)
    /// (never granting two holders); pass `options=-c default_transaction_isolation=read\ committed`
    /// in the connection string to avoid that.
    ///
    /// r2d2 backs off between attempts to reconnect up to half the pool's `connection_timeout`,
    /// so after an outage (a restart, a failover) a pool with r2d2's default 30 s can stay unusable
    /// for up to 15 s after the server is back; checkouts wait the pool's timeout. Pools that
    /// pgtenure builds cap the back-off at 500 ms and still wait the whole timeout. A pool
    /// timeout over 100 years (r2d2 accepts up to `Duration::MAX`) waits 100 years.
    ///
    /// Keep `min_idle` at 1 or more (r2d2's default keeps `max_size`): with none kept idle, r2d2
    /// opens no connection when it discards a broken one, so a checkout already waiting then
    /// waits out its whole timeout with room in the pool. Pools that pgtenure builds ask for one
    /// when a broken connection goes back.
    pub fn from_pool(pool: Pool<PostgresConnectionManager<NoTls>>) -> Db {
        Db::from_source(Pooling::new(pool, NoTls))
    }

    /// Uses a pool you built yourself with a TLS connector (`tls`: the connector the pool's manager
    /// was made with, for cancel requests, which open a connection of their own). Any TLS stack
    /// for the driver works: `postgres-openssl`, `postgres-native-tls`, a rustls connector. The
    /// advice of [`Db::from_pool`] holds here too.
    pub fn from_tls_pool<T>(pool: Pool<PostgresConnectionManager<T>>, tls: T) -> Db
    where
        T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static,
        T::Stream: Send,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        Db::from_source(Pooling::new(pool, tls))
    }

    fn from_source(source: impl Source + 'static) -> Db {
        crate::observe::describe_once();
        Db {
            lending: Arc::new(Lending::new(source.max_size())),
            pool: Arc::new(source),
            cancel_on_deadline: true,
            sending: Sending::default(),
            timeline_tokens: true,
            promotion_hold_off: true,
            promotions: Arc::new(Promotions::default()),
            schemas: Arc::new(SchemaChecks::default()),
            handover: None,
        }
    }

    /// Whether new fencing tokens and terms fold in the server's timeline, so that they only grow
    /// across a promotion of a standby, even one that missed the last writes (asynchronous
    /// replication): every token drawn after a promotion is then above every token drawn before
    /// it. A token is `(timeline - 1) * 2^48` plus a sequence value: on a server that was never
    /// promoted (timeline 1) tokens are the plain sequence values, and after the n-th promotion
    /// they jump by n * 2^48.
    ///
    /// Defaults to `true`, except that [`Db::connect`] and [`DbBuilder::build`] turn it off when the
    /// server refuses the WAL functions it needs (`pg_current_wal_lsn`; Amazon Aurora does, and
    /// its storage does not lose acknowledged writes at a failover). Turn it off yourself for such
    /// a server behind [`DbBuilder::build_lazy`] or [`Db::from_pool`], or every grant fails with
    /// the server's refusal.
    pub fn with_timeline_tokens(mut self, on: bool) -> Db {
        self.timeline_tokens = on;
        self
    }

    /// See [`Db::with_timeline_tokens`].
    pub fn timeline_tokens(&self) -> bool {
        self.timeline_tokens
    }

    /// Whether a lease key or a leadership that has lapsed (or was never held) waits, after a
    /// promotion of a standby, until both the longest TTL ever asked of its table and the asking
    /// grant's own TTL have passed since a grant first saw the new timeline. With asynchronous
    /// replication the promoted standby may have missed a holder's last renewals, or its whole
    /// grant; that holder believes it holds the key until its local deadline, at most one TTL
    /// after the old primary's last commit, so the wait keeps anyone else from being granted what
    /// an old holder still believes it holds. Live tenures are not held off: their renewals go on.
    /// A refused acquire says until when ([`Refusal::HeldOff`](crate::leases::Refusal::HeldOff)).
    ///
    /// The record is a one-row table beside the lease or leader table (`<table>_promotion`), read
    /// once per `Db` and table (one more statement at the first grant, and after a promotion) and
    /// passed to grants as parameters. Not covered: a holder whose TTL is longer than both the
    /// longest TTL the standby received and the contender's own (a longer TTL first asked for within the replication lag, or the raw
    /// [`Leases::renew`](crate::leases::Leases::renew) with a longer TTL than the grant's): keep each
    /// key's and each fleet's TTL the same everywhere.
    ///
    /// Defaults to `true`. With synchronous replication the standby has every acknowledged
    /// renewal, and the wait only delays new grants after a failover: turn it off there if that
    /// matters more. It needs the timeline ([`Db::with_timeline_tokens`]): without it nothing is
    /// held off. Tick claims, fire claims and membership units are not held off.
    pub fn with_promotion_hold_off(mut self, on: bool) -> Db {
        self.promotion_hold_off = on;
        self
    }

    /// See [`Db::with_promotion_hold_off`].
    pub fn promotion_hold_off(&self) -> bool {
        self.promotion_hold_off
    }

    /// How statements are sent (see [`StatementMode`]): [`StatementMode::Auto`] by default, or
    /// what the connection string's `statement_mode` or [`DbBuilder::statement_mode`] said.
    /// Connections pgtenure already used switch at their next statement.
    pub fn with_statement_mode(mut self, mode: StatementMode) -> Db {
        self.sending.set_mode(mode);
        self
    }

    /// See [`Db::with_statement_mode`].
    pub fn statement_mode(&self) -> StatementMode {
        self.sending.mode()
    }

    /// How this `Db`'s connections have sent statements so far: how many got each way, and whether
    /// a pooler was found (see [`StatementModes`]). Each connection's way is also logged once at
    /// `info` under `pgtenure::db`.
    pub fn statement_modes(&self) -> StatementModes {
        self.sending.modes()
    }

    /// Sets where the configuration says the server is (a pool pgtenure built).
    pub(crate) fn with_targets(mut self, targets: Targets) -> Db {
        self.sending.set_targets(targets);
        self
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

    /// A connection from the pool, for statements of your own (a fenced write, a check), waiting at
    /// most the pool's connection timeout. It goes back to the pool when dropped.
    ///
    /// At most one fewer than the pool's size are lent at once (all of a pool of one): the last
    /// connection is kept for lease renewals and membership heartbeats, which run on pgtenure's own
    /// threads, so that an application holding every connection it can get does not make its
    /// leases expire. pgtenure's own operations do not count against that limit.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when none could be had in time:
    /// every lendable connection stayed lent, or the pool could not open one (saying why).
    pub fn connection(&self) -> Result<Connection> {
        const CONTEXT: &str = "get a connection";
        let until = Instant::now() + self.pool.connection_timeout();
        let lent = self.lending.take(until).ok_or_else(|| {
            let kept = self.pool.max_size() - self.lending.limit();
            Error::checkout(format!(
                "{CONTEXT} failed: all {} connections the pool lends are in use ({kept} more kept \
                 for lease renewals and heartbeats); drop one, or raise the pool's max_size",
                self.lending.limit()
            ))
        })?;
        Ok(self.conn_until(CONTEXT, Some(until))?.lend(lent))
    }

    /// The pool's connections: how many are open, and how many of them idle.
    ///
    /// Connections parked for the threads that used them last ([`DbBuilder::thread_affinity`])
    /// are given back to the pool first, so they count as idle.
    pub fn pool_state(&self) -> r2d2::State {
        self.pool.state()
    }

    /// How long a statement waits for a pool connection at most.
    pub(crate) fn pool_timeout(&self) -> Duration {
        self.pool.connection_timeout()
    }

    /// The tables whose schema versions were found good enough for the handles' statements, shared
    /// by this `Db`'s clones (filled by the version check and the migrations).
    pub(crate) fn schema_checks(&self) -> &SchemaChecks {
        &self.schemas
    }

    /// The most connections the pool opens.
    pub fn pool_max_size(&self) -> u32 {
        self.pool.max_size()
    }

    /// Takes a connection for one statement, waiting at most the pool's connection timeout, or
    /// until `until` when that comes first.
    pub(crate) fn conn_until(&self, context: &str, until: Option<Instant>) -> Result<Connection> {
        // At hand (this thread's parked connection, an idle one): nothing waited, no clock read.
        if let Some(conn) = self.pool.try_get() {
            observe::pool_wait(Duration::ZERO, true);
            return Ok(conn);
        }
        let wait = match until {
            None => self.pool.connection_timeout(),
            Some(until) => until
                .saturating_duration_since(Instant::now())
                .min(self.pool.connection_timeout()),
        };
        if wait.is_zero() {
            // Not a pool timeout: nothing was waited for (so it says nothing about an outage).
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "{context} failed: no idle database connection in the pool, and no time left \
                     to wait for one"
                ),
            ));
        }
        let asked = Instant::now();
        let got = self.pool.wait_for(wait);
        observe::pool_wait(asked.elapsed(), got.is_ok());
        got.map_err(|e| Error::from_pool(context, e, self.pool.last_connect_error()))
    }

    /// What cancels the statement `conn` (of this `Db`'s pool) is running, from another thread.
    pub(crate) fn cancel_key(&self, conn: &Connection) -> conn::CancelKey {
        conn::CancelKey::new(conn, self.pool.canceller())
    }

    /// Runs `statement` on a pooled connection, sending it again on another connection only when
    /// that is safe (a statement whose outcome is unknown may have committed: an unknown outcome is
    /// not "never ran").
    ///
    /// A pooled connection whose server session ended while it sat idle (a terminated backend, an
    /// idle-session timeout, a restarted server) answers the next statement with the server's
    /// `FATAL` report (57P01, 57P05) without running it: that connection is discarded and the
    /// statement sent at once on another, up to the pool's size. A connection that the driver
    /// already knows is closed is skipped before anything is sent. Any other failure after sending
    /// (the connection closed or reset, possibly after the server committed) is an unknown outcome:
    /// it is returned, unless `policy` says the statement is idempotent by construction, in which
    /// case it is sent once more to find out. A statement rolled back to break a deadlock did not
    /// run and is sent again (up to three times).
    pub(crate) fn with_conn<T>(
        &self,
        context: &str,
        policy: Policy,
        mut statement: impl FnMut(&mut Connection) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        // Read only when a connection is skipped (the pool's settings are not on the hot path).
        let skips = || self.pool.max_size().clamp(1, MAX_STALE_SKIPS);
        let (mut skipped, mut resent, mut deadlocks) = (0, false, 0);
        loop {
            let mut conn = self
                .conn_until(context, policy.until)?
                .parked_in(self.pool.parking());
            if conn.is_closed() {
                // Nothing was sent; dropping it makes r2d2 discard it.
                skipped += 1;
                if skipped > skips() {
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
                    ..
                }) if never_ran(&error) || (before_sending && connection_lost(&error)) => {
                    discard(&mut conn);
                    conn.never_park();
                    skipped += 1;
                    if skipped > skips() {
                        return Err(Error::from_postgres(context, error));
                    }
                    log::debug!(target: "pgtenure::db", "{context}: the pooled connection's session had ended ({error}); using another");
                }
                Err(Failure { error, .. })
                    if deadlocked(&error) && deadlocks < MAX_DEADLOCK_RESENDS =>
                {
                    deadlocks += 1;
                    log::info!(target: "pgtenure::db", "{context}: rolled back to break a deadlock ({error}); sending it again");
                }
                Err(Failure { error, .. })
                    if outcome_unknown(&error)
                        && policy.resend == Resend::Idempotent
                        && !resent =>
                {
                    resent = true;
                    log::info!(target: "pgtenure::db", "{context}: the connection failed after the statement was sent ({error}); sending it again to find out (it is idempotent)");
                }
                Err(Failure {
                    error,
                    cancelled: Some(why),
                    ..
                }) if error.code() == Some(&SqlState::QUERY_CANCELED) => {
                    return Err(Error::cancelled_by_pgtenure(context, why, error))
                }
                Err(Failure { error, .. }) => return Err(Error::from_postgres(context, error)),
            }
        }
    }

    /// Runs one statement in its own implicit transaction, in one round trip, returning its rows.
    /// `policy` says whether it may be sent again when its outcome is unknown: [`Policy::ONCE`]
    /// unless the statement is idempotent by construction (reads, renewals keyed by token, claims
    /// keyed by their call id), then [`Policy::IDEMPOTENT`].
    pub(crate) fn query<P: Params, Q: Params<Static = P::Static>>(
        &self,
        context: &str,
        policy: Policy,
        statement: &Statement<P>,
        params: &Q,
    ) -> Result<Vec<Row>> {
        self.with_conn(context, policy, |conn| self.run(conn, statement, params))
    }

    /// Like [`Db::query`] for a statement that returns exactly one row.
    pub(crate) fn query_one<P: Params, Q: Params<Static = P::Static>>(
        &self,
        context: &str,
        policy: Policy,
        statement: &Statement<P>,
        params: &Q,
    ) -> Result<Row> {
        one_row(context, self.query(context, policy, statement, params)?)
    }

    /// Runs `statement` once on `conn` (inside [`Db::with_conn`]), in the way the connection's
    /// statement mode decided.
    pub(crate) fn run<P: Params, Q: Params<Static = P::Static>>(
        &self,
        conn: &mut Connection,
        statement: &Statement<P>,
        params: &Q,
    ) -> std::result::Result<Vec<Row>, Failure> {
        let (client, cache) = conn.client_and_cache();
        self.sending.run(client, cache, statement, params)
    }

    /// Prepares `statement` on `conn` if it is not known to be there, without running it (see
    /// [`Statement::prepare`]).
    pub(crate) fn prepare<P: Params>(
        &self,
        conn: &mut Connection,
        statement: &Statement<P>,
    ) -> std::result::Result<(), Failure> {
        let (client, cache) = conn.client_and_cache();
        self.sending.prepare(client, cache, statement)
    }
}

/// How many times one operation is sent again after the server rolled it back to break a deadlock.
const MAX_DEADLOCK_RESENDS: u32 = 3;

/// The most dead pooled connections one operation skips before it reports the failure.
const MAX_STALE_SKIPS: u32 = 16;

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

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("Db")
            .field("cancel_on_deadline", &self.cancel_on_deadline)
            .field("statement_mode", &self.statement_mode())
            .field("statement_modes", &self.statement_modes())
            .field("timeline_tokens", &self.timeline_tokens())
            .field("promotion_hold_off", &self.promotion_hold_off())
            .field("handover_notifications", &self.handover_notifications())
            .field("max_size", &self.pool.max_size())
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}
