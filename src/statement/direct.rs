//! The proof that a pooled connection reaches the server directly (so that protocol-level prepared
//! statements are safe on it): where the configuration says the server is, and where the session
//! says it was accepted.

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;

use parking_lot::Mutex;
use postgres::config::{Host, LoadBalanceHosts};
use postgres::{Client, Row};

use super::failure::Failure;
use crate::error::classify::never_ran;
use crate::error::Result;
use crate::row::Read;

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
pub(super) struct Seen {
    pub(super) pid: i32,
    /// The address the server accepted the connection on; `None` over a Unix socket.
    pub(super) addr: Option<IpAddr>,
    pub(super) addr_port: Option<u16>,
    /// The server's `port` setting.
    pub(super) port: u16,
    /// The server's `unix_socket_directories`.
    pub(super) socket_dirs: String,
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
    pub(super) fn direct(&self, seen: &Seen) -> bool {
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

/// The question a new connection answers once: its backend, and where the server accepted it.
const SESSION: &str = include_str!("../../sql/schema/session.sql");

/// What the connection's session said of the server (`seen`, kept with the connection), asked at
/// its first statement only: a way decided again (another mode, a clone of the `Db` in another
/// mode) does not ask again.
pub(super) fn asked(
    client: &mut Client,
    seen: &mut Option<Seen>,
) -> std::result::Result<Option<Seen>, Failure> {
    if seen.is_none() {
        *seen = session(client)?;
    }
    Ok(seen.clone())
}

/// Whether `client`, a connection of its own outside the pool (the handover listener's), reaches
/// the server where `targets` point ([`Targets::direct`]), and what its session said, for the log.
pub(crate) fn proven_direct(
    client: &mut Client,
    targets: &Targets,
) -> std::result::Result<(bool, String), postgres::Error> {
    Ok(match session(client).map_err(|f| f.error)? {
        None => (false, "the session did not say where it runs".to_owned()),
        Some(seen) if targets.direct(&seen) => (true, format!("the server accepted it at {seen}")),
        Some(seen) => (
            false,
            format!(
                "the server accepted it at {seen}, not at {targets} where the configuration points"
            ),
        ),
    })
}

/// What a new connection's session says of the server behind it (`sql/schema/session.sql`):
/// `None` when the server refused the question (then nothing is proven); a broken connection is
/// the failure, with nothing of the operation sent.
fn session(client: &mut Client) -> std::result::Result<Option<Seen>, Failure> {
    match client.query_typed(SESSION, &[]).map(|mut rows| rows.pop()) {
        Ok(None) => Ok(None),
        Ok(Some(row)) => match seen(&row) {
            Ok(seen) => Ok(Some(seen)),
            Err(e) => {
                log::debug!(target: "pgtenure::db", "{e}; nothing is proven");
                Ok(None)
            }
        },
        Err(error) if error.as_db_error().is_some() && !never_ran(&error) => {
            log::debug!(target: "pgtenure::db", "the session probe failed ({error}); nothing is proven");
            Ok(None)
        }
        Err(error) => Err(Failure::before_sending(error)),
    }
}

/// What the session probe's row says.
fn seen(row: &Row) -> Result<Seen> {
    let read = Read::server(row, "probe the session", &"the session probe");
    Ok(Seen {
        pid: read.column("pid")?,
        addr: read
            .column::<Option<String>>("addr")?
            .and_then(|a| a.parse().ok()),
        addr_port: read
            .column::<Option<i32>>("addr_port")?
            .and_then(|p| u16::try_from(p).ok()),
        // Out of range: no port to compare with.
        port: u16::try_from(read.column::<i32>("port")?).unwrap_or(0),
        socket_dirs: read.column("socket_dirs")?,
    })
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
}
