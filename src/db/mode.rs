//! Statement modes: how a [`Db`](crate::Db) sends its statements, and the proof that a pooled
//! connection reaches the server directly (so that protocol-level prepared statements are safe on
//! it).

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use postgres::config::{Host, LoadBalanceHosts};

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

/// Where the configuration says the server is: each host with its port, in the order the driver
/// tries them.
#[derive(Debug)]
pub(crate) struct Targets {
    list: Vec<Target>,
    /// `load_balance_hosts=random`: the driver tries hosts, and each host's addresses, in a random
    /// order.
    random: bool,
    /// The first host's first address as last resolved: a proof resolves the name only when it
    /// has none yet or the server reports another address (not at every new connection: a
    /// connection opened before a name server failed would wait for it).
    resolved: Mutex<Option<IpAddr>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A host name or address (resolved at each proof), or the `hostaddr` given for it.
    Tcp {
        host: String,
        addr: Option<IpAddr>,
        port: u16,
    },
    /// A Unix socket directory.
    Unix { dir: String, port: u16 },
}

/// What a new connection's session says of the server (`sql/schema/session.sql`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) pid: i32,
    /// The address the server accepted the connection on; `None` over a Unix socket.
    pub(crate) addr: Option<IpAddr>,
    pub(crate) addr_port: Option<u16>,
    /// The server's `port` setting.
    pub(crate) port: u16,
    /// The server's `unix_socket_directories`.
    pub(crate) socket_dirs: String,
}

impl Targets {
    /// The hosts and ports of `config`, as the driver pairs them (one port for all, or one each;
    /// a `hostaddr` with its host, or alone).
    pub(crate) fn of(config: &postgres::Config) -> Targets {
        let (hosts, addrs, ports) = (
            config.get_hosts(),
            config.get_hostaddrs(),
            config.get_ports(),
        );
        let port = |i: usize| match ports {
            [] => 5432,
            [one] => *one,
            many => many.get(i).copied().unwrap_or(5432),
        };
        let list = (0..hosts.len().max(addrs.len()))
            .map(|i| match (hosts.get(i), addrs.get(i)) {
                (Some(Host::Unix(dir)), _) => Target::Unix {
                    dir: dir.to_string_lossy().into_owned(),
                    port: port(i),
                },
                (host, addr) => Target::Tcp {
                    host: match host {
                        Some(Host::Tcp(name)) => name.clone(),
                        _ => addr.map(IpAddr::to_string).unwrap_or_default(),
                    },
                    addr: addr.copied(),
                    port: port(i),
                },
            })
            .collect();
        let random = config.get_load_balance_hosts() == LoadBalanceHosts::Random;
        Targets {
            list,
            random,
            resolved: Mutex::new(None),
        }
    }

    /// Whether `seen` is the server itself at the address the driver tries first: the first
    /// host's first address (its `hostaddr`, the address it is, or the first its name resolves
    /// to) and port, or the first host's socket directory and port. A connection the server
    /// accepted anywhere else may have come through whatever answered at an earlier address, a
    /// pooler included (a pooler listed before the server it forwards to, or a name that resolves
    /// to a pooler's address and then the server's): unproven. With `load_balance_hosts=random`
    /// there is no first: proven only where the configuration names one host with one address.
    pub(crate) fn direct(&self, seen: &Seen) -> bool {
        let Some(first) = self.list.first() else {
            return false;
        };
        if self.random && self.list.len() > 1 {
            return false;
        }
        match (first, seen.addr) {
            (Target::Tcp { host, addr, port }, Some(server)) => {
                if seen.addr_port != Some(*port) {
                    return false;
                }
                if let Some(fixed) = addr.or_else(|| host.parse().ok()) {
                    return same_ip(fixed, server);
                }
                let known = *self.resolved.lock();
                if known.is_some_and(|first| same_ip(first, server)) {
                    return true;
                }
                let first = first_address(host, *port, self.random);
                if first.is_some() {
                    *self.resolved.lock() = first;
                }
                first.is_some_and(|first| same_ip(first, server))
            }
            (Target::Unix { dir, port }, None) => {
                seen.port == *port
                    && seen
                        .socket_dirs
                        .split(',')
                        .map(str::trim)
                        .any(|d| same_dir(d, dir))
            }
            _ => false,
        }
    }
}

/// Where the configuration connects, "db1:5432, db2:5433" (a socket directory as its path).
impl fmt::Display for Targets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, target) in self.list.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match target {
                Target::Tcp { host, port, .. } => write!(f, "{host}:{port}")?,
                Target::Unix { dir, port } => write!(f, "{dir} (port {port})")?,
            }
        }
        Ok(())
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.addr, self.addr_port) {
            (Some(addr), Some(port)) => write!(f, "{addr}:{port}")?,
            _ => write!(
                f,
                "a Unix socket in {} (port {})",
                self.socket_dirs, self.port
            )?,
        }
        write!(f, ", backend {}", self.pid)
    }
}

/// The address the driver tries first for the name `host`: `None` when it does not resolve, or
/// resolves to several addresses tried in a random order.
fn first_address(host: &str, port: u16, random: bool) -> Option<IpAddr> {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            if random && addrs.len() > 1 {
                return None;
            }
            addrs.first().copied()
        }
        Err(e) => {
            log::debug!(target: "pgtenure::db", "resolving {host} to prove a direct connection failed: {e}");
            None
        }
    }
}

/// Equal addresses, an IPv4 address and its IPv6-mapped form included.
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

fn same_dir(a: &str, b: &str) -> bool {
    let trim = |s: &str| s.trim_end_matches('/').to_owned();
    trim(a) == trim(b)
        || match (Path::new(a).canonicalize(), Path::new(b).canonicalize()) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(addr: Option<&str>, addr_port: Option<u16>) -> Seen {
        Seen {
            pid: 7,
            addr: addr.map(|a| a.parse().unwrap()),
            addr_port,
            port: 5432,
            socket_dirs: "/var/run/postgresql, /tmp".to_owned(),
        }
    }

    fn targets(url: &str) -> Targets {
        Targets::of(&url.parse().unwrap())
    }

    #[test]
    fn a_connection_is_direct_only_when_the_server_accepted_it_where_the_url_points() {
        let local = targets("postgres://u@127.0.0.1:5432/db");
        assert!(local.direct(&seen(Some("127.0.0.1"), Some(5432))));
        // A pooler on another port, or a port mapping: the server accepted on its own port.
        assert!(
            !targets("postgres://u@127.0.0.1:6432/db").direct(&seen(Some("127.0.0.1"), Some(5432)))
        );
        // A pooler or NAT on another address.
        assert!(!local.direct(&seen(Some("10.0.0.5"), Some(5432))));
        // Over a Unix socket, where the URL names TCP.
        assert!(!local.direct(&seen(None, None)));
        // A host name resolves: the first address it resolves to; IPv4-mapped IPv6 is the same
        // address.
        let first = ("localhost", 5432)
            .to_socket_addrs()
            .unwrap()
            .next()
            .unwrap();
        let first = first.ip().to_string();
        assert!(targets("postgres://u@localhost:5432/db").direct(&seen(Some(&first), Some(5432))));
        assert!(local.direct(&seen(Some("::ffff:127.0.0.1"), Some(5432))));
        // Several hosts: only the first, which the driver tries first. A later one may be the
        // server that a pooler at an earlier one forwards to.
        let two = targets("host=127.0.0.1,10.9.9.9 port=5432,5432 user=u");
        assert!(two.direct(&seen(Some("127.0.0.1"), Some(5432))));
        assert!(!two.direct(&seen(Some("10.9.9.9"), Some(5432))));
        let pooler_first = targets("host=::1,127.0.0.1 port=5432 user=u");
        assert!(!pooler_first.direct(&seen(Some("127.0.0.1"), Some(5432))));
        // Hosts tried in a random order: none is first.
        let random = "host=127.0.0.1,10.9.9.9 port=5432 load_balance_hosts=random user=u";
        assert!(!targets(random).direct(&seen(Some("127.0.0.1"), Some(5432))));
        let one = "host=127.0.0.1 port=5432 load_balance_hosts=random user=u";
        assert!(targets(one).direct(&seen(Some("127.0.0.1"), Some(5432))));
        // hostaddr wins over the name, and may stand alone.
        let by_addr = targets("host=db.invalid hostaddr=127.0.0.1 port=5432 user=u");
        assert!(by_addr.direct(&seen(Some("127.0.0.1"), Some(5432))));
        let addr_only = targets("hostaddr=127.0.0.1 port=5432 user=u");
        assert!(addr_only.direct(&seen(Some("127.0.0.1"), Some(5432))));
    }

    #[test]
    fn a_unix_socket_connection_is_direct_in_the_servers_directory_and_port() {
        let socket = targets("host=/tmp port=5432 user=u");
        assert!(socket.direct(&seen(None, None)));
        assert!(targets("host=/tmp/ port=5432 user=u").direct(&seen(None, None)));
        // A pooler's socket: another directory, or another port.
        assert!(!targets("host=/run/pgbouncer port=5432 user=u").direct(&seen(None, None)));
        assert!(!targets("host=/tmp port=6432 user=u").direct(&seen(None, None)));
        // Over TCP, where the URL names a socket.
        assert!(!socket.direct(&seen(Some("127.0.0.1"), Some(5432))));
    }

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
