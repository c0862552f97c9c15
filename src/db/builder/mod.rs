//! [`DbBuilder`]: the pool's size and timeouts, and the connection defaults pgtenure applies.

mod connect_refusal;
mod pool;

use std::fmt;
use std::time::{Duration, Instant};

use postgres::NoTls;
use r2d2_postgres::PostgresConnectionManager;

use self::connect_refusal::{chain, for_good};
use super::conn::{ConnectAttempts, MakeTls, Pooling};
use super::ssl::SslMode;
use super::Db;
use crate::error::{Error, Result};
use crate::statement::{StatementMode, Targets};

const DEFAULT_MAX_SIZE: u32 = 16;
/// The longest `application_name` the server keeps (`NAMEDATALEN - 1`).
const MAX_APPLICATION_NAME: usize = 63;
const DEFAULT_POOL_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest r2d2 waits between attempts to open a connection while the server is unreachable
/// (its back-off doubles up to half the pool's connection timeout): so a pool is usable again
/// within about this long of the server's return (a restart, a promoted standby), not seconds
/// later. Checkouts still wait the whole connection timeout.
const MAX_RECONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// The driver's default keepalive idle time (two hours), which pgtenure shortens.
const DRIVER_KEEPALIVES_IDLE: Duration = Duration::from_secs(2 * 60 * 60);
const KEEPALIVES_IDLE: Duration = Duration::from_secs(10);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVES_RETRIES: u32 = 2;
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(20);
/// Startup option that pins pgtenure's own sessions to READ COMMITTED, whatever the database's or
/// role's default (a space inside an option value is escaped with a backslash).
const READ_COMMITTED_OPTION: &str = "-c default_transaction_isolation=read\\ committed";

/// Builds a [`Db`]'s connection pool; every setter's default is pgtenure's (see [`Db::connect`]).
///
/// It sets up connections, and how statements are sent on them ([`DbBuilder::statement_mode`]).
/// What else pgtenure does on them is set on the [`Db`] it builds, the same for a pool of your own
/// ([`Db::from_pool`]): [`Db::with_cancel_on_deadline`].
pub struct DbBuilder {
    config: postgres::Config,
    max_size: u32,
    connection_timeout: Duration,
    read_committed: bool,
    ssl_mode: SslMode,
    root_cert: Option<String>,
    /// The client certificate and key files (`sslcert`, `sslkey`).
    client_cert: Option<String>,
    client_key: Option<String>,
    statement_mode: StatementMode,
    handover: bool,
    thread_affinity: bool,
}

impl DbBuilder {
    /// Starts from a driver configuration you built; pgtenure's connection defaults are applied to
    /// whatever it leaves unset. The environment (`PG*` variables, `~/.pgpass`, service files) is
    /// not read: it is for [`Db::builder`] and [`DbBuilder::from_env`].
    ///
    /// The driver's `ssl_mode` of `config` is taken as the [`SslMode`] (`Require` needs the feature
    /// `tls`, checked by [`DbBuilder::build`]); [`DbBuilder::ssl_mode`] and
    /// [`DbBuilder::ssl_root_cert`] set the modes the driver does not know.
    pub fn from_config(config: postgres::Config) -> DbBuilder {
        let ssl_mode = match config.get_ssl_mode() {
            postgres::config::SslMode::Disable => SslMode::Disable,
            postgres::config::SslMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        };
        DbBuilder {
            config,
            max_size: DEFAULT_MAX_SIZE,
            connection_timeout: DEFAULT_POOL_TIMEOUT,
            read_committed: true,
            ssl_mode,
            root_cert: None,
            client_cert: None,
            client_key: None,
            statement_mode: StatementMode::Auto,
            handover: false,
            thread_affinity: true,
        }
    }

    /// Starts from the environment, as psql does with no connection string: see
    /// [`Db::from_env`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a `PG*` variable or a
    /// service file value that does not parse (naming it), and for a service that no service file
    /// defines.
    pub fn from_env() -> Result<DbBuilder> {
        Db::builder_with("", &super::libpq::Process)
    }

    /// The client certificate (a PEM file, with the certificates between it and the server's
    /// trusted authority after it, if any) and its private key (a PEM file, PKCS#8, PKCS#1 or SEC1,
    /// unencrypted) presented to a server that asks for one: libpq's `sslcert` and `sslkey`, for
    /// servers whose `pg_hba.conf` admits with `cert` (mutual TLS). The key file must not be
    /// readable by group or others (0600; 0640 when owned by root and read by another user), as
    /// libpq requires. Read by
    /// [`DbBuilder::build`]. Defaults to the connection string's `sslcert` and `sslkey`, else
    /// `~/.postgresql/postgresql.crt` and `~/.postgresql/postgresql.key` when they exist.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when a path is blank or holds a
    /// NUL byte.
    pub fn ssl_client_cert(self, cert: &str, key: &str) -> Result<DbBuilder> {
        self.client_files(Some(cert.to_owned()), Some(key.to_owned()))
    }

    pub(super) fn client_files(
        mut self,
        cert: Option<String>,
        key: Option<String>,
    ) -> Result<DbBuilder> {
        for (name, path) in [("sslcert", &cert), ("sslkey", &key)] {
            if path
                .as_deref()
                .is_some_and(|p| p.trim().is_empty() || p.contains('\0'))
            {
                return Err(Error::invalid_input(format!(
                    "{name} is blank or holds a NUL byte; give a PEM file's path"
                )));
            }
        }
        if cert.is_some() {
            self.client_cert = cert;
        }
        if key.is_some() {
            self.client_key = key;
        }
        Ok(self)
    }

    /// The `application_name` to report when neither the connection string, the service nor
    /// `PGAPPNAME` names one (libpq's `fallback_application_name`): a tool's own name, which the
    /// user's choice overrides.
    ///
    /// # Errors
    ///
    /// As [`DbBuilder::application_name`].
    pub fn fallback_application_name(self, name: &str) -> Result<DbBuilder> {
        if self.config.get_application_name().is_some() {
            return Ok(self);
        }
        self.application_name(name)
    }

    /// How connections use TLS (see [`SslMode`]). Defaults to the URL's `sslmode`, else `Prefer`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a mode that needs TLS
    /// (`Require`, `VerifyCa`, `VerifyFull`) when pgtenure is built without the feature `tls`.
    pub fn ssl_mode(mut self, mode: SslMode) -> Result<DbBuilder> {
        check_available(mode)?;
        self.ssl_mode = mode;
        Ok(self)
    }

    /// The certificate authorities that a verifying [`SslMode`] checks the server's certificate
    /// against: a PEM file's path, or `"system"` for the operating system's trust store (libpq's
    /// `sslrootcert`). Given with `Prefer` or `Require`, the certificate is checked as with
    /// `VerifyCa`. Read by [`DbBuilder::build`]. Defaults to the URL's `sslrootcert`, else
    /// `~/.postgresql/root.crt` when a verifying mode needs one.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `root_cert` is blank or
    /// holds a NUL byte.
    pub fn ssl_root_cert(mut self, root_cert: &str) -> Result<DbBuilder> {
        if root_cert.trim().is_empty() || root_cert.contains('\0') {
            return Err(Error::invalid_input(
                "sslrootcert is blank or holds a NUL byte; give a PEM file's path or \"system\"",
            ));
        }
        self.root_cert = Some(root_cert.to_owned());
        Ok(self)
    }

    /// How statements are sent (see [`StatementMode`]). Defaults to the connection string's
    /// `statement_mode`, else [`StatementMode::Auto`]: protocol-level prepared statements on
    /// connections proven to reach the server directly, SQL-level ones on any other.
    pub fn statement_mode(mut self, mode: StatementMode) -> DbBuilder {
        self.statement_mode = mode;
        self
    }

    /// Handover by notification (off by default): a release or a resignation (also a `stop`) sends
    /// `NOTIFY` on its table's channel, and from its first waiter on the `Db` keeps one listener
    /// connection outside the pool (thread `pgtenure-listen`, application name + ` (listener)`)
    /// that wakes this process's waiters of that key or fleet at once, rather than at their next
    /// poll: campaigns, [`Leases::acquire_waiting`](crate::leases::Leases::acquire_waiting),
    /// `lease-run --wait`. A hint only: the woken poll decides. Without the listener (a connection
    /// not proven direct, as a transaction pooler loses `LISTEN`; a lost connection, reopened
    /// with back-off) waiters poll as before, logged once. Turn it on in every process of a fleet
    /// (the freeing side notifies); notifying commits run one at a time (`docs/performance.md`).
    /// Dropping the `Db`'s last clone joins the listener (within 100 ms, or its connect in
    /// progress). Not for [`Db::from_pool`], whose configuration pgtenure does not know.
    pub fn handover_notifications(mut self, on: bool) -> DbBuilder {
        self.handover = on;
        self
    }

    /// The `application_name` every connection reports to the server (`pg_stat_activity`, the
    /// server's log), so an operator can tell this application's sessions apart and aim
    /// `pg_terminate_backend` at one holder. Defaults to the connection string's
    /// `application_name`, else `pgtenure`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when `name` is blank, holds a
    /// NUL byte or a character other than printable ASCII (the server shows those as `?`), or is
    /// over 63 bytes (the server cuts it there).
    pub fn application_name(mut self, name: &str) -> Result<DbBuilder> {
        if name.trim().is_empty()
            || name.len() > MAX_APPLICATION_NAME
            || !name.bytes().all(|b| (b' '..=b'~').contains(&b))
        {
            return Err(Error::invalid_input(format!(
                "application_name {name:?} must be 1 to {MAX_APPLICATION_NAME} printable ASCII \
                 characters (the server cuts longer names and shows other characters as ?)"
            )));
        }
        self.config.application_name(name);
        Ok(self)
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
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when it is under 1 ms or over
    /// 100 years, as every duration (it bounds every checkout and each loop handle's `stop`).
    pub fn connection_timeout(mut self, timeout: Duration) -> Result<DbBuilder> {
        crate::input::micros(
            "pool connection_timeout",
            timeout,
            crate::input::MIN_DURATION,
        )?;
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

    /// Builds the pool and waits until one connection is open. One connection is tried first on
    /// its own: a refusal that waiting cannot fix (authentication, an unknown role or database) is
    /// reported at once, with the server's reason; any other failure is retried by the pool until
    /// the connection timeout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Database`](crate::ErrorKind::Database) at once for such a refusal;
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no connection could be opened
    /// within the connection timeout, saying why the first attempt failed.
    pub fn build(self) -> Result<Db> {
        check_available(self.ssl_mode)?;
        check_client_cert(&self)?;
        match self.tls()? {
            None => self.build_with(NoTls),
            #[cfg(feature = "tls")]
            Some(tls) => self.build_with(tls),
        }
    }

    fn build_with<T: MakeTls>(self, tls: T) -> Result<Db> {
        let started = Instant::now();
        let config = self.effective_config();
        // Within the connection timeout, whatever the per-connection one.
        let mut probe = config.clone();
        let connect_timeout = config
            .get_connect_timeout()
            .map_or(self.connection_timeout, |t| {
                (*t).min(self.connection_timeout)
            });
        probe.connect_timeout(connect_timeout);
        // The first connection tells at once what waiting cannot fix; it sends no statement and
        // is closed before the pool opens its own.
        let first = match probe.connect(tls.clone()) {
            Ok(_) => None,
            Err(e) => Some(for_good(e)?),
        };
        let attempts = ConnectAttempts::default();
        let workers = pool::workers();
        let pool = self
            .pool_builder(&attempts, &workers)
            .min_idle(Some(1))
            .build_unchecked(PostgresConnectionManager::new(config.clone(), tls.clone()));
        if let Some(first) = first {
            // The rest of the connection timeout, for the pool to open one.
            let left = self
                .connection_timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1));
            pool.get_timeout(left).map_err(|e| {
                // The driver's words with their cause ("connection refused"), which the pool's
                // record of its last attempt leaves out.
                Error::checkout(format!(
                    "connect failed: could not connect to {} within {:?}: {}; check that the \
                     server runs and accepts connections there (the pool's last attempt: {e})",
                    Targets::of(&config),
                    self.connection_timeout,
                    chain(&first),
                ))
                .with_source(e)
            })?;
        }
        let db = Db::from_source(Pooling::built(
            pool,
            tls.clone(),
            self.connection_timeout,
            attempts,
            (&workers, self.thread_affinity),
        ))
        .with_targets(Targets::of(&config))
        .with_statement_mode(self.statement_mode)
        .with_handover(self.handover, &config, tls, self.statement_mode)?;
        // Whether tokens can fold in the timeline: asked on a pool connection, in its statement
        // mode, like every other statement.
        Ok(match db.probe_timeline() {
            Some(on) => db.with_timeline_tokens(on),
            None => db,
        })
    }

    /// Builds the pool without connecting: the first operation opens the first connection. Use it
    /// for a process that must start while the database is still unreachable.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the TLS settings cannot be
    /// used (as [`DbBuilder::build`]); nothing is connected.
    pub fn build_lazy(self) -> Result<Db> {
        check_available(self.ssl_mode)?;
        check_client_cert(&self)?;
        match self.tls()? {
            None => self.build_lazy_with(NoTls),
            #[cfg(feature = "tls")]
            Some(tls) => self.build_lazy_with(tls),
        }
    }

    fn build_lazy_with<T: MakeTls>(self, tls: T) -> Result<Db> {
        let attempts = ConnectAttempts::default();
        let workers = pool::workers();
        let builder = self.pool_builder(&attempts, &workers).min_idle(Some(0));
        let config = self.effective_config();
        let targets = Targets::of(&config);
        let pool =
            builder.build_unchecked(PostgresConnectionManager::new(config.clone(), tls.clone()));
        Db::from_source(Pooling::built(
            pool,
            tls.clone(),
            self.connection_timeout,
            attempts,
            (&workers, self.thread_affinity),
        ))
        .with_targets(targets)
        .with_statement_mode(self.statement_mode)
        .with_handover(self.handover, &config, tls, self.statement_mode)
    }

    /// The TLS connector the settings ask for: `None` for plain connections.
    #[cfg(feature = "tls")]
    fn tls(&self) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>> {
        if self.ssl_mode == SslMode::Disable {
            return Ok(None);
        }
        super::tls::connector(&super::tls::Settings {
            mode: self.ssl_mode,
            root_cert: self.root_cert.as_deref(),
            client_cert: self.client_cert.as_deref(),
            client_key: self.client_key.as_deref(),
        })
        .map(Some)
    }

    #[cfg(not(feature = "tls"))]
    fn tls(&self) -> Result<Option<std::convert::Infallible>> {
        Ok(None)
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
        config.ssl_mode(match self.ssl_mode {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
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

/// Refuses a client certificate this build cannot present.
fn check_client_cert(builder: &DbBuilder) -> Result<()> {
    if builder.client_cert.is_some()
        && builder.ssl_mode != SslMode::Disable
        && !cfg!(feature = "tls")
    {
        return Err(Error::invalid_input(
            "sslcert needs TLS, and pgtenure was built without it: enable its cargo feature \"tls\"",
        ));
    }
    Ok(())
}

/// Refuses a mode this build cannot serve.
pub(super) fn check_available(mode: SslMode) -> Result<()> {
    if mode.needs_tls() && !cfg!(feature = "tls") {
        return Err(Error::invalid_input(format!(
            "sslmode={mode} needs TLS, and pgtenure was built without it: enable its cargo feature \"tls\""
        )));
    }
    Ok(())
}

impl fmt::Debug for DbBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The driver config's Debug hides the password.
        f.debug_struct("DbBuilder")
            .field("config", &self.config)
            .field("max_size", &self.max_size)
            .field("connection_timeout", &self.connection_timeout)
            .field("read_committed", &self.read_committed)
            .field("ssl_mode", &self.ssl_mode)
            .field("root_cert", &self.root_cert)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("statement_mode", &self.statement_mode)
            .field("handover", &self.handover)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_application_names_its_connections() {
        let named = Db::builder("postgres://u@db/app")
            .unwrap()
            .application_name("billing-worker-3")
            .unwrap();
        assert_eq!(
            named.effective_config().get_application_name(),
            Some("billing-worker-3")
        );
        for bad in ["", "  ", "a\0b", "caf\u{e9}", &"x".repeat(64)] {
            let refused = Db::builder("postgres://u@db/app")
                .unwrap()
                .application_name(bad)
                .unwrap_err();
            assert!(refused.is_invalid_input(), "{bad:?}: {refused}");
        }
        assert!(Db::builder("postgres://u@db/app")
            .unwrap()
            .application_name(&"x".repeat(63))
            .is_ok());
    }

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

    /// A failover setup names the primary and its standby, and asks for the one that accepts
    /// writes: both forms reach the driver whole.
    #[test]
    fn a_multi_host_url_keeps_every_host_and_the_session_target() {
        use postgres::config::{Host, TargetSessionAttrs};
        let tcp = |h: &str| Host::Tcp(h.to_owned());
        for url in [
            "postgres://postgres@127.0.0.1:5433,127.0.0.2:5434/postgres\
             ?target_session_attrs=read-write&sslmode=disable",
            "host=127.0.0.1,127.0.0.2 port=5433,5434 user=postgres dbname=postgres \
             target_session_attrs=read-write sslmode=disable",
        ] {
            let config = Db::builder(url).unwrap().effective_config();
            assert_eq!(
                config.get_hosts(),
                &[tcp("127.0.0.1"), tcp("127.0.0.2")],
                "{url}"
            );
            assert_eq!(config.get_ports(), &[5433, 5434], "{url}");
            assert_eq!(
                config.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite,
                "{url}"
            );
            assert_eq!(config.get_dbname(), Some("postgres"));
        }
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
}
