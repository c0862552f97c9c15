//! A small TCP proxy between the library and PostgreSQL, for fault tests. On command it cuts every
//! connection, blackholes traffic (sockets stay open, nothing is forwarded) and heals, adds latency,
//! delays new connections (a cancel request is one), or closes a connection right after forwarding
//! the server's whole answer to a statement (the server committed; the client sees its answer and
//! then the end of the stream). It also counts protocol round trips: the client's `Sync` and simple
//! `Query` messages.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use parking_lot::Mutex;

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    blackhole: AtomicBool,
    latency_us: AtomicU64,
    /// Bumped by `cut`: pipes of an older epoch stop.
    epoch: AtomicU64,
    round_trips: AtomicU64,
    driver_named: AtomicU64,
    accepted: AtomicU64,
    /// Chunks that the blackhole holds right now, either way: statements or their answers.
    held: AtomicU64,
    streams: Mutex<Vec<TcpStream>>,
    connect_delay_us: AtomicU64,
    /// One-shot: close the next connection whose client sends bytes containing this pattern (empty:
    /// any) right after the server's next complete answer (`ReadyForQuery`).
    fin_armed: Mutex<Option<Vec<u8>>>,
    /// Whether that close also drops the answer (the client sees the end of the stream instead).
    fin_drops_answer: AtomicBool,
    fins: AtomicU64,
    /// The statements prepared through the proxy (`PREPARE pgt_…`), by name: an `EXECUTE` of one
    /// matches a pattern that its statement's text contains.
    prepared: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
}

/// Forwards every connection made to its port on 127.0.0.1 to a target. Dropping it stops accepting,
/// closes every forwarded connection and joins its threads.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    pipes: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    /// Starts forwarding `127.0.0.1:port` (0: any free port) to `target`.
    pub fn start(port: u16, target: SocketAddr) -> io::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let pipes: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (s, p) = (shared.clone(), pipes.clone());
        let acceptor = thread::spawn(move || {
            for client in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let delayed = s.connect_delay_us.load(Ordering::SeqCst) > 0;
                let (s, pipes) = (s.clone(), p.clone());
                let connect = move || {
                    let delay = s.connect_delay_us.load(Ordering::SeqCst);
                    if delay > 0 {
                        // Real time is the subject: the injected connect delay.
                        thread::sleep(Duration::from_micros(delay));
                        if s.stop.load(Ordering::SeqCst) {
                            return;
                        }
                    }
                    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5))
                    else {
                        return;
                    };
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    s.accepted.fetch_add(1, Ordering::SeqCst);
                    let clones = (
                        client.try_clone(),
                        server.try_clone(),
                        client.try_clone(),
                        server.try_clone(),
                    );
                    let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = clones else {
                        return;
                    };
                    s.streams.lock().extend([c3, s3]);
                    let epoch = s.epoch.load(Ordering::SeqCst);
                    let fin = Arc::new(AtomicBool::new(false));
                    let (up, down) = (s.clone(), s.clone());
                    let (fin_up, fin_down) = (fin.clone(), fin);
                    let mut pipes = pipes.lock();
                    pipes.retain(|h| !h.is_finished());
                    pipes.push(thread::spawn(move || {
                        pipe(client, server, up, epoch, Side::Client(fin_up))
                    }));
                    pipes.push(thread::spawn(move || {
                        pipe(s2, c2, down, epoch, Side::Server(fin_down))
                    }));
                };
                if delayed {
                    let mut list = p.lock();
                    list.retain(|h| !h.is_finished());
                    list.push(thread::spawn(connect));
                } else {
                    connect();
                }
            }
        });
        Ok(Proxy {
            port,
            shared,
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

    /// A connection config for the test database through this proxy.
    pub fn config(&self) -> pgtenure::postgres::Config {
        super::config_at("127.0.0.1", self.port)
    }

    /// Closes every connection forwarded so far (both sides), as a network cut would.
    pub fn cut(&self) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        for stream in self.shared.streams.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Stops forwarding in both directions; sockets stay open, data waits.
    pub fn blackhole(&self) {
        self.shared.blackhole.store(true, Ordering::SeqCst);
    }

    /// Forwards again, including what waited.
    pub fn heal(&self) {
        self.shared.blackhole.store(false, Ordering::SeqCst);
    }

    /// Delays every forwarded chunk by `latency` (zero: none).
    pub fn set_latency(&self, latency: Duration) {
        self.shared
            .latency_us
            .store(latency.as_micros() as u64, Ordering::SeqCst);
    }

    /// Delays every new connection by `delay` before it is forwarded (zero: none). A cancel request
    /// is a new connection: this makes it land late.
    pub fn set_connect_delay(&self, delay: Duration) {
        self.shared
            .connect_delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Closes the next connection whose client sends a message containing `pattern` (any
    /// connection for an empty pattern) right after forwarding the server's complete answer to it:
    /// the server has run and committed the statement, the client reads its whole answer and then
    /// the end of the stream. One-shot. A prepared statement's `EXECUTE` matches what its text
    /// contains; its `PREPARE` does not (it runs nothing).
    pub fn fin_after_answer(&self, pattern: &str) {
        self.shared.fin_drops_answer.store(false, Ordering::SeqCst);
        *self.shared.fin_armed.lock() = Some(pattern.as_bytes().to_vec());
    }

    /// Like [`Proxy::fin_after_answer`], but the answer is lost: the server has run and committed
    /// the statement, the client reads the end of the stream instead of its answer (an unknown
    /// outcome). One-shot.
    pub fn lose_answer(&self, pattern: &str) {
        self.shared.fin_drops_answer.store(true, Ordering::SeqCst);
        *self.shared.fin_armed.lock() = Some(pattern.as_bytes().to_vec());
    }

    /// Whether a `fin_after_answer` is still waiting for its statement.
    pub fn fin_armed(&self) -> bool {
        self.shared.fin_armed.lock().is_some()
    }

    /// Connections closed by `fin_after_answer` so far.
    pub fn fins(&self) -> u64 {
        self.shared.fins.load(Ordering::SeqCst)
    }

    /// Client `Sync` and simple `Query` messages seen so far: one per round trip of the extended or
    /// simple query protocol.
    pub fn round_trips(&self) -> u64 {
        self.shared.round_trips.load(Ordering::SeqCst)
    }

    /// Statements the client prepared under a driver-chosen name (`Parse` with a name that is
    /// neither empty nor pgtenure's `pgt_…`): what a pooler that does not track protocol-level
    /// statements can mix up.
    pub fn driver_named_statements(&self) -> u64 {
        self.shared.driver_named.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Chunks the blackhole holds right now, either way: statements (or their answers) that hang on
    /// the wire (what a test waits for before it measures how long a stop takes during an outage).
    pub fn held(&self) -> u64 {
        self.shared.held.load(Ordering::SeqCst)
    }
}

/// Which way a pipe copies, with the connection's "close after the answer" flag.
enum Side {
    /// Client to server: counts round trips, arms the flag when an armed pattern goes by.
    Client(Arc<AtomicBool>),
    /// Server to client: closes both sides after a `ReadyForQuery` once the flag is set.
    Server(Arc<AtomicBool>),
}

/// Holds a chunk (counted in `held`) while the blackhole is on; false when the pipe must stop.
fn hold_while_blackholed(shared: &Shared, alive: impl Fn(&Shared) -> bool) -> bool {
    if !shared.blackhole.load(Ordering::SeqCst) {
        return true;
    }
    shared.held.fetch_add(1, Ordering::SeqCst);
    while shared.blackhole.load(Ordering::SeqCst) && alive(shared) {
        // The poll interval of the blackhole: it holds the chunk until heal, cut or stop.
        thread::sleep(Duration::from_millis(5));
    }
    shared.held.fetch_sub(1, Ordering::SeqCst);
    alive(shared)
}

/// Copies one direction until either side closes or the proxy cuts or stops, then closes both.
fn pipe(mut from: TcpStream, mut to: TcpStream, shared: Arc<Shared>, epoch: u64, side: Side) {
    let mut counter = Counter::default();
    let mut answers = ServerFramer::default();
    let mut buf = [0_u8; 16 * 1024];
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let alive = |shared: &Shared| {
        !shared.stop.load(Ordering::SeqCst) && shared.epoch.load(Ordering::SeqCst) == epoch
    };
    'copy: while alive(&shared) {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => break,
        };
        if !hold_while_blackholed(&shared, alive) {
            break 'copy;
        }
        let latency = shared.latency_us.load(Ordering::SeqCst);
        if latency > 0 {
            // Real time is the subject: the injected latency of each chunk.
            thread::sleep(Duration::from_micros(latency));
        }
        let chunk = &buf[..n];
        match &side {
            Side::Client(fin) => {
                shared
                    .round_trips
                    .fetch_add(counter.feed(chunk), Ordering::SeqCst);
                shared
                    .driver_named
                    .fetch_add(std::mem::take(&mut counter.driver_named), Ordering::SeqCst);
                let preparing = prepared_name(chunk, b"PREPARE ");
                if let Some(name) = preparing {
                    shared.prepared.lock().insert(name.to_vec(), chunk.to_vec());
                }
                let mut armed = shared.fin_armed.lock();
                let hit = armed.as_ref().is_some_and(|pattern| {
                    let executed = prepared_name(chunk, b"EXECUTE ")
                        .and_then(|name| shared.prepared.lock().get(name).cloned());
                    pattern.is_empty()
                        || (preparing.is_none() && contains(chunk, pattern))
                        || executed.is_some_and(|text| contains(&text, pattern))
                });
                if hit && counter.typed {
                    *armed = None;
                    fin.store(true, Ordering::SeqCst);
                }
            }
            Side::Server(_) => {}
        }
        if let Side::Server(fin) = &side {
            let ready = answers.feed(chunk);
            if ready && fin.load(Ordering::SeqCst) {
                // The whole answer, and the end of the stream in the same segment, so the client
                // reads both at once: as a link that dies right after the server answered.
                shared.fins.fetch_add(1, Ordering::SeqCst);
                if !shared.fin_drops_answer.load(Ordering::SeqCst) {
                    cork(&to);
                    let _ = to.write_all(chunk);
                }
                let _ = to.shutdown(Shutdown::Write);
                break;
            }
        }
        if to.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The name after `verb` in `pgtenure`'s `PREPARE pgt_…` / `EXECUTE pgt_…` (36 bytes).
fn prepared_name<'a>(chunk: &'a [u8], verb: &[u8]) -> Option<&'a [u8]> {
    let at = chunk
        .windows(verb.len() + 4)
        .position(|w| w.starts_with(verb) && w.ends_with(b"pgt_"))?;
    chunk.get(at + verb.len()..at + verb.len() + 36)
}

/// Holds back what is written to `stream` until it is shut down, so the data and the FIN leave in one
/// segment.
fn cork(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and a pointer to an int that lives across the call.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CORK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Frames the server's side of the protocol: reports whether a chunk completed a `ReadyForQuery`.
#[derive(Default)]
struct ServerFramer {
    buf: Vec<u8>,
}

impl ServerFramer {
    fn feed(&mut self, data: &[u8]) -> bool {
        self.buf.extend_from_slice(data);
        let (mut pos, mut ready) = (0, false);
        while self.buf.len() - pos >= 5 {
            let rest = &self.buf[pos..];
            let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
            if rest.len() < 1 + len {
                break;
            }
            ready |= rest[0] == b'Z';
            pos += 1 + len;
        }
        self.buf.drain(..pos);
        ready
    }
}

/// Frames the client's side of the PostgreSQL protocol and counts `Sync` ('S') and `Query` ('Q'),
/// and `Parse` ('P') messages that name their statement with a name the driver chose (`s0`, …:
/// neither unnamed nor pgtenure's content-addressed `pgt_…`).
#[derive(Default)]
struct Counter {
    buf: Vec<u8>,
    typed: bool,
    driver_named: u64,
}

impl Counter {
    fn feed(&mut self, data: &[u8]) -> u64 {
        const SSL_REQUEST: u32 = 80_877_103;
        const GSSENC_REQUEST: u32 = 80_877_104;
        self.buf.extend_from_slice(data);
        let (mut pos, mut count) = (0, 0);
        loop {
            let rest = &self.buf[pos..];
            if !self.typed {
                // Startup-phase messages have no type byte: length, then a code.
                if rest.len() < 8 {
                    break;
                }
                let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                let code = u32::from_be_bytes(rest[4..8].try_into().unwrap());
                if rest.len() < len {
                    break;
                }
                pos += len;
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    self.typed = true;
                }
            } else {
                if rest.len() < 5 {
                    break;
                }
                let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
                if rest.len() < 1 + len {
                    break;
                }
                if rest[0] == b'S' || rest[0] == b'Q' {
                    count += 1;
                }
                if rest[0] == b'P'
                    && rest.len() > 5
                    && rest[5] != 0
                    && !rest[5..].starts_with(b"pgt_")
                {
                    self.driver_named += 1;
                }
                pos += 1 + len;
            }
        }
        self.buf.drain(..pos);
        count
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor with a connection of our own.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for stream in self.shared.streams.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
        // Joined without holding the list: a delayed connection still starting adds its pipes.
        loop {
            let pipes: Vec<JoinHandle<()>> = self.pipes.lock().drain(..).collect();
            if pipes.is_empty() {
                break;
            }
            for pipe in pipes {
                let _ = pipe.join();
            }
        }
    }
}

/// The TCP address of the test database as the library reaches it (the harness URL must use TCP):
/// the PgBouncer in front of it with `PGTENURE_TEST_PGBOUNCER=1`.
pub fn database_addr() -> SocketAddr {
    tcp_addr(&super::url_config())
}

/// The TCP address of the database server itself, never a pooler: for a test that counts the
/// library's own round trips (behind PgBouncer a session that moves to a server connection lacking
/// a prepared statement pays two more, the pooler's cost and not the operation's).
pub fn server_addr() -> SocketAddr {
    tcp_addr(&super::direct_url().parse().unwrap())
}

fn tcp_addr(config: &pgtenure::postgres::Config) -> SocketAddr {
    use pgtenure::postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        other => panic!("the fault tests need a TCP database URL, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    (host.as_str(), port)
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap()
}
