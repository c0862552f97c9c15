//! The exporter's HTTP/1.1 server: a few hundred lines on `std::net`, for two GET pages on an
//! operator's network, written so that no client can make it queue or grow.
//!
//! - Each connection is accepted at once and stamped on arrival, and gets a thread of its own
//!   (at most [`MAX_CONNECTIONS`](connections::MAX_CONNECTIONS) open at once; beyond them a
//!   connection is answered 503 and closed by the accepting thread, which never blocks on a
//!   client). A request's deadline counts from that stamp, whatever else waits.
//! - The request line and headers are read into a buffer of [`MAX_HEAD`] bytes at most (beyond:
//!   431 and close) and must arrive whole within [`HEAD_TIMEOUT`] of the connection (else: 408 and
//!   close); a body is never read.
//! - Each answer is written within [`WRITE_TIMEOUT`](message::WRITE_TIMEOUT) (a client that does
//!   not read loses its connection then), with `Connection: close`: one request per connection.
//! - [`Running::stop`] stops accepting, closes the connections still sending their request, gives
//!   the answers in hand a grace period, then closes the rest and joins every thread.

mod connections;
mod message;

use std::io::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use self::connections::{Connections, Phase, Refused};
use self::message::{head, linger, parse_head, read_head, write_answer, HeadError, MAX_HEAD};
pub(super) use self::message::{Request, Response};

/// How long a request's line and headers may take to arrive, from the connection.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// What answers the requests.
pub(super) trait Answer: Send + Sync + 'static {
    fn answer(&self, request: &Request) -> Response;
}

/// A bound listener, not yet serving.
#[derive(Debug)]
pub(super) struct Server {
    listener: TcpListener,
    addr: SocketAddr,
}

impl Server {
    pub(super) fn bind(addr: SocketAddr) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Server { listener, addr })
    }

    /// Where it listens (the port chosen when asked for port 0).
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Accepts connections on a thread of its own, each answered by `answer`, until stopped.
    pub(super) fn start<A: Answer>(self, answer: Arc<A>) -> io::Result<Running> {
        let connections = Arc::new(Connections::default());
        let acceptor = {
            let connections = connections.clone();
            thread::Builder::new()
                .name("pgtenure-http".into())
                .spawn(move || accept(&self.listener, &connections, &answer))?
        };
        Ok(Running {
            acceptor,
            connections,
            addr: self.addr,
        })
    }
}

/// A server accepting connections.
#[derive(Debug)]
pub(super) struct Running {
    acceptor: JoinHandle<Vec<JoinHandle<()>>>,
    connections: Arc<Connections>,
    addr: SocketAddr,
}

impl Running {
    /// Stops accepting, closes the connections still sending their request, and gives the
    /// answers in hand `grace` (`answering` is called to have them answered at once, e.g. by no
    /// longer waiting for the database); then closes what is left and joins every thread whose
    /// connection closed. Returns the number of answers cut off. Takes `grace` and 2 s at most
    /// (1 s to wake the listener, 1 s for cut-off threads to return).
    pub(super) fn stop(self, grace: Duration, answering: impl FnOnce()) -> usize {
        self.connections.stop_admitting();
        // The accepting thread waits in accept(2): a connection of our own wakes it.
        let woken = TcpStream::connect_timeout(&wake_address(self.addr), Duration::from_secs(1));
        let threads = match woken {
            Ok(_) => self.acceptor.join().unwrap_or_default(),
            Err(e) => {
                say!("pgtenure: exporter: cannot wake the listener to stop it ({e}); leaving it");
                Vec::new()
            }
        };
        self.connections.shut_down(Some(Phase::Head));
        answering();
        let left = self.connections.wait(grace);
        let mut open = 0;
        if left > 0 {
            self.connections.shut_down(None);
            // Each thread returns as soon as its socket fails.
            open = self.connections.wait(Duration::from_secs(1));
        }
        for thread in threads {
            // A thread whose connection closed is returning: joined. With some still open
            // (never seen), the finished ones only.
            if open == 0 || thread.is_finished() {
                let _ = thread.join();
            }
        }
        if open > 0 {
            say!("pgtenure: exporter: left {open} connections' threads that did not return");
        }
        left
    }
}

/// The address that reaches a listener on `addr` from this host.
fn wake_address(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// The accepting thread: a thread per connection, until stopped; returns those threads.
fn accept<A: Answer>(
    listener: &TcpListener,
    connections: &Arc<Connections>,
    answer: &Arc<A>,
) -> Vec<JoinHandle<()>> {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    loop {
        let accepted = listener.accept();
        let arrived = Instant::now();
        if connections.is_stopping() {
            return threads;
        }
        let stream = match accepted {
            Ok((stream, _)) => Arc::new(stream),
            // Out of descriptors, a connection reset before it was accepted: the next one.
            Err(e) => {
                if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) {
                    // Nothing to accept with until a descriptor is freed.
                    connections.wait_for_a_close(Duration::from_millis(100));
                }
                continue;
            }
        };
        // Threads that ended, joined.
        let (ended, running): (Vec<_>, Vec<_>) = threads.into_iter().partition(|t| t.is_finished());
        for thread in ended {
            let _ = thread.join();
        }
        threads = running;
        let id = match connections.admit(&stream) {
            Ok(id) => id,
            Err(why) => {
                refuse(&stream, why);
                continue;
            }
        };
        let spawned = {
            let connections = connections.clone();
            let answer = answer.clone();
            let stream = stream.clone();
            thread::Builder::new()
                .name("pgtenure-http-conn".into())
                .spawn(move || {
                    serve(&stream, arrived, id, &connections, &*answer);
                    connections.close(id);
                })
        };
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(_) => {
                connections.close(id);
                refuse(&stream, Refused::Full);
            }
        }
    }
}

/// Answers 503 without waiting: a new connection's send buffer is empty, so the short answer goes
/// at once or not at all.
fn refuse(mut stream: &TcpStream, why: Refused) {
    let _ = stream.set_nonblocking(true);
    let body = match why {
        Refused::Full => "too many connections: try again\n",
        Refused::Stopping => "the exporter is stopping: try another\n",
    };
    let head = head(false, 503, "text/plain; charset=utf-8", body.len(), false);
    let _ = stream.write_all(format!("{head}{body}").as_bytes());
    let _ = stream.shutdown(Shutdown::Both);
}

/// One connection: reads its request, answers it, closes.
fn serve<A: Answer + ?Sized>(
    stream: &TcpStream,
    arrived: Instant,
    id: u64,
    connections: &Connections,
    answer: &A,
) {
    let response = match read_head(stream, arrived + HEAD_TIMEOUT) {
        Ok(head) => match parse_head(&head, arrived) {
            Some(request) => {
                connections.answering(id);
                let response = answer.answer(&request);
                let head_only = request.method == "HEAD";
                write_answer(stream, request.http10, head_only, &response);
                linger(stream);
                return;
            }
            None => Response::text(400, "not an HTTP/1.x request\n"),
        },
        Err(HeadError::TooLarge) => Response::text(
            431,
            &format!("the request line and headers exceed {MAX_HEAD} bytes\n"),
        ),
        Err(HeadError::Timeout) => Response::text(
            408,
            &format!(
                "the request did not arrive within {} s\n",
                HEAD_TIMEOUT.as_secs()
            ),
        ),
        Err(HeadError::Malformed) => Response::text(400, "not an HTTP/1.x request\n"),
        Err(HeadError::Gone) => return,
    };
    write_answer(stream, false, false, &response);
    linger(stream);
}
