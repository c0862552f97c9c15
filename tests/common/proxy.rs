//! A small TCP proxy between the library and PostgreSQL, for fault tests: it can refuse connections
//! (not listening yet), and forward them once started on a chosen port.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;

/// Forwards every connection made to `port` on 127.0.0.1 to `target`. Dropping it stops accepting,
/// closes every forwarded connection and joins its threads.
pub struct Proxy {
    port: u16,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<()>>,
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:port` to `target`.
    pub fn start(port: u16, target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let stop = Arc::new(AtomicBool::new(false));
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let pipes: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (s, st, p) = (stop.clone(), streams.clone(), pipes.clone());
        let acceptor = thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
                    continue;
                };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                st.lock()
                    .extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                let mut pipes = p.lock();
                pipes.push(thread::spawn(move || pipe(client, server)));
                pipes.push(thread::spawn(move || pipe(s2, c2)));
            }
        });
        Ok(Proxy {
            port,
            stop,
            streams,
            acceptor: Some(acceptor),
            pipes,
        })
    }

    /// A free port on 127.0.0.1 (nothing listens on it until a proxy is started there).
    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Copies one direction until either side closes, then closes both.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor with a connection of our own.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for stream in self.streams.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        for pipe in self.pipes.lock().drain(..) {
            let _ = pipe.join();
        }
    }
}

/// The TCP address of the test database (the harness URL must use TCP).
pub fn database_addr() -> SocketAddr {
    use pgtenure::postgres::config::Host;
    let config: pgtenure::postgres::Config = super::url().parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        other => panic!("the fault tests need a TCP database URL, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    use std::net::ToSocketAddrs;
    (host.as_str(), port)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
}
