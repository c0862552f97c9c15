//! Statement modes: how a [`Db`](crate::Db) sends its statements, and the record of the ways its
//! connections got.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};

/// How a [`Db`](crate::Db) sends its statements, each planned once per server connection or not
/// at all.
///
/// Set it with [`DbBuilder::statement_mode`](crate::DbBuilder::statement_mode),
/// [`Db::with_statement_mode`](crate::Db::with_statement_mode), or in the connection string beside
/// `sslmode`: `?statement_mode=sql` in a URL, `statement_mode=sql` in `key=value` pairs (taken out
/// before the driver reads the rest). See the guide's "Poolers and prepared statements".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StatementMode {
    /// `Protocol` on a pooled connection proven to reach the server directly, `Sql` on any other.
    /// The proof, once per new connection (one statement): the server's own address and port, as
    /// its backend accepted the connection (`inet_server_addr()`, `inet_server_port()`; over a
    /// Unix socket, the server's socket directories and port), are the address the driver tries
    /// first (the first host's `hostaddr`, its address, or the first address its name resolves
    /// to) and the configured port. A pooler, a NAT or a port mapping in between fails it; so
    /// does a connection made to a later host or address, which may have come through a pooler
    /// at an earlier one. A pool of your own ([`Db::from_pool`](crate::Db::from_pool)) has no
    /// configured host that pgtenure can read: its connections get `Sql`.
    ///
    /// Backstop: a protocol-level statement that the session no longer has (SQLSTATE 26000) while
    /// the backend's process id differs from the one the connection was proven with proves a
    /// pooler in between: the `Db` then uses `Sql` on every connection for good, and logs a
    /// warning once. In every mode that prepares, three calls in a row on one connection that
    /// find their statement gone (a pooler that resets server connections after every
    /// transaction) make that connection send its statements unprepared.
    #[default]
    Auto,
    /// The protocol's own prepared statements (the driver's `prepare_typed`), once per pooled
    /// connection, on every connection, without the proof: the fastest, and safe on a direct
    /// connection, in a pooler's session mode, and behind poolers that track protocol-level
    /// statements (PgBouncer 1.21+ with `max_prepared_statements` above 0, PgDog, Odyssey 1.5+).
    /// Behind a pooler that does not track them, a statement can run under another process's
    /// statement of the same name (the driver names them `s0, s1, …` in every process) before
    /// the backstop of `Auto`, which holds here too, finds the pooler.
    Protocol,
    /// SQL `PREPARE` under a name derived from the statement's text, then `EXECUTE` with the
    /// values written as literals: safe behind any pooler (a name means the same statement on
    /// every server connection), at the cost of parsing each `EXECUTE`. Amazon RDS Proxy pins a
    /// session that prepares statements (either way) to one server connection: use `Unprepared`
    /// there.
    Sql,
    /// Every statement parsed and planned at every call, never prepared: for a proxy that pins or
    /// refuses prepared statements (Amazon RDS Proxy), and PgBouncer with
    /// `server_reset_query_always`.
    /// Several times slower for the statements that grant and renew.
    Unprepared,
}

impl StatementMode {
    pub(crate) fn parse(value: &str) -> Result<StatementMode> {
        Ok(match value {
            "auto" => StatementMode::Auto,
            "protocol" => StatementMode::Protocol,
            "sql" => StatementMode::Sql,
            "unprepared" => StatementMode::Unprepared,
            other => {
                return Err(Error::invalid_input(format!(
                    "statement_mode {other:?} is not one of auto, protocol, sql, unprepared"
                )))
            }
        })
    }
}

impl fmt::Display for StatementMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StatementMode::Auto => "auto",
            StatementMode::Protocol => "protocol",
            StatementMode::Sql => "sql",
            StatementMode::Unprepared => "unprepared",
        })
    }
}

/// How the connections of a [`Db`](crate::Db) send statements: how many pooled connections got
/// each way since the `Db` was made (a connection counts once, when pgtenure first runs a
/// statement on it), and whether a pooler was found behind a connection that used the protocol's
/// prepared statements ([`StatementMode::Auto`]'s backstop). See
/// [`Db::statement_modes`](crate::Db::statement_modes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatementModes {
    /// Connections that used protocol-level prepared statements.
    pub protocol: u64,
    /// Connections that used SQL-level `PREPARE` and `EXECUTE`.
    pub sql: u64,
    /// Connections that sent every statement unprepared.
    pub unprepared: u64,
    /// Whether the backstop found a pooler: every connection then uses SQL-level statements.
    pub pooler_found: bool,
    /// Whether prepared statements kept vanishing from a connection's server connection (three
    /// calls in a row found theirs gone: a pooler that resets server connections after every
    /// transaction): such connections send their statements unprepared from then on.
    pub vanishing_found: bool,
}

impl fmt::Display for StatementModes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} protocol, {} sql, {} unprepared",
            self.protocol, self.sql, self.unprepared
        )?;
        if self.pooler_found {
            f.write_str(" (a pooler was found: sql from then on)")?;
        }
        if self.vanishing_found {
            f.write_str(" (prepared statements kept vanishing: unprepared where they did)")?;
        }
        Ok(())
    }
}

/// The way one connection sends statements: a [`StatementMode`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    Protocol,
    Sql,
    Unprepared,
}

/// A `Db`'s record of the ways its connections got, shared by its clones.
#[derive(Debug, Default)]
pub(crate) struct Ways {
    protocol: AtomicU64,
    sql: AtomicU64,
    unprepared: AtomicU64,
    pooler_found: AtomicBool,
    vanishing_found: AtomicBool,
}

impl Ways {
    pub(crate) fn count(&self, way: Way) {
        let counter = match way {
            Way::Protocol => &self.protocol,
            Way::Sql => &self.sql,
            Way::Unprepared => &self.unprepared,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that a pooler was found; `true` the first time.
    pub(crate) fn found_pooler(&self) -> bool {
        !self.pooler_found.swap(true, Ordering::SeqCst)
    }

    /// Records that prepared statements kept vanishing; `true` the first time.
    pub(crate) fn found_vanishing(&self) -> bool {
        !self.vanishing_found.swap(true, Ordering::SeqCst)
    }

    pub(crate) fn pooler_found(&self) -> bool {
        self.pooler_found.load(Ordering::SeqCst)
    }

    pub(crate) fn snapshot(&self) -> StatementModes {
        StatementModes {
            protocol: self.protocol.load(Ordering::Relaxed),
            sql: self.sql.load(Ordering::Relaxed),
            unprepared: self.unprepared.load(Ordering::Relaxed),
            pooler_found: self.pooler_found(),
            vanishing_found: self.vanishing_found.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_as_in_a_connection_string() {
        for mode in [
            StatementMode::Auto,
            StatementMode::Protocol,
            StatementMode::Sql,
            StatementMode::Unprepared,
        ] {
            assert_eq!(StatementMode::parse(&mode.to_string()).unwrap(), mode);
        }
        let error = StatementMode::parse("prepared").unwrap_err();
        assert!(error
            .to_string()
            .contains("auto, protocol, sql, unprepared"));
    }
}
