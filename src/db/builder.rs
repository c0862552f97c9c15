//! [`DbBuilder`]: the pool's size and timeouts, and the connection defaults pgtenure applies.

use std::fmt;
use std::time::{Duration, Instant};

use postgres::NoTls;
use r2d2::Pool;
use r2d2_postgres::PostgresConnectionManager;

use super::conn::MakeTls;
use super::Db;
use crate::error::{Error, Result};

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

/// Builds a [`Db`]'s connection pool; every setter's default is pgtenure's (see [`Db::connect`]).
///
/// It sets up connections only. What pgtenure does on them (cancelling stuck statements, preparing
/// statements) is set on the [`Db`] it builds, the same for a pool of your own
/// ([`Db::from_pool`]): [`Db::with_cancel_on_deadline`], [`Db::with_prepared_statements`].
pub struct DbBuilder {
    config: postgres::Config,
    max_size: u32,
    connection_timeout: Duration,
    read_committed: bool,
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
        let first = match probe.connect(NoTls) {
            Ok(client) => {
                drop(client);
                None
            }
            Err(e) if refused_for_good(&e) => return Err(Error::from_postgres("connect", e)),
            Err(e) => Some(e),
        };
        let pool = self
            .pool_builder()
            .min_idle(Some(1))
            .build_unchecked(PostgresConnectionManager::new(config, NoTls));
        if let Some(first) = first {
            // The rest of the connection timeout, for the pool to open one.
            let left = self
                .connection_timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1));
            pool.get_timeout(left).map_err(|e| {
                // The driver's words with their cause ("connection refused"), which the pool's
                // record of its last attempt leaves out.
                Error::from_pool("connect", e)
                    .with_detail(&format!("the first attempt: {}", chain(&first)))
            })?;
        }
        Ok(Db::from_pool(pool))
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
    }

    fn pool_builder<T: MakeTls>(&self) -> r2d2::Builder<PostgresConnectionManager<T>> {
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

/// Whether a failed connection attempt is a refusal that waiting cannot fix: the server rejected
/// the credentials (class 28: a wrong password, an unknown role) or does not have the database
/// (3D000).
fn refused_for_good(e: &postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        code.code().starts_with("28") || *code == postgres::error::SqlState::INVALID_CATALOG_NAME
    })
}

/// An error with its causes, "error connecting to server: Connection refused (os error 111)".
fn chain(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl fmt::Debug for DbBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The driver config's Debug hides the password.
        f.debug_struct("DbBuilder")
            .field("config", &self.config)
            .field("max_size", &self.max_size)
            .field("connection_timeout", &self.connection_timeout)
            .field("read_committed", &self.read_committed)
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
}
