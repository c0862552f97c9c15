//! The exporter's HTTP/1.1 server: a few hundred lines on `std::net`, for two GET pages on an
//! operator's network, written so that no client can make it queue or grow.
//!
//! - Each connection is accepted at once and stamped on arrival, and gets a thread of its own
//!   (at most [`MAX_CONNECTIONS`] open at once; beyond them a connection is answered 503 and
//!   closed by the accepting thread, which never blocks on a client). A request's deadline counts
//!   from that stamp, whatever else waits.
//! - The request line and headers are read into a buffer of [`MAX_HEAD`] bytes at most (beyond:
//!   431 and close) and must arrive whole within [`HEAD_TIMEOUT`] of the connection (else: 408 and
//!   close); a body is never read.
//! - Each answer is written within [`WRITE_TIMEOUT`] (a client that does not read loses its
//!   connection then), with `Connection: close`: one request per connection.
//! - [`Running::stop`] stops accepting, closes the connections still sending their request, gives
//!   the answers in hand a grace period, then closes the rest and joins every thread.

use std::collections::HashMap;
use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The most bytes of request line and headers read from a request; a longer head is answered 431.
pub(super) const MAX_HEAD: usize = 8 * 1024;

/// How long a request's line and headers may take to arrive, from the connection.
pub(super) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long writing an answer may take; a client that does not read it by then is cut off.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once (a thread each); beyond them a connection is answered 503 at once.
pub(super) const MAX_CONNECTIONS: usize = 512;

/// After an answer, how long unread bytes the client sent are drained before the connection
/// closes (closing with unread bytes would reset it, and the client could lose the answer).
const LINGER: Duration = Duration::from_millis(500);

/// The most bytes drained after an answer.
const LINGER_BYTES: usize = 64 * 1024;

/// A request's line and the headers the exporter reads.
#[derive(Debug)]
pub(super) struct Request {
    /// When its connection was accepted: its deadline counts from here.
    pub(super) arrived: Instant,
    pub(super) method: String,
    /// The path, without the query.
    pub(super) path: String,
    /// Whether the client speaks HTTP/1.0 (answered in kind).
    http10: bool,
    headers: Vec<(String, String)>,
}

impl Request {
    /// The first header named `name` (case-insensitively), trimmed.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: a status, a content type and a body (left out for HEAD).
#[derive(Debug)]
pub(super) struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    /// `Allow: GET, HEAD` (with 405).
    allow: bool,
}

impl Response {
    pub(super) fn new(status: u16, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            body,
            allow: false,
        }
    }

    /// Plain text.
    pub(super) fn text(status: u16, body: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body.to_owned())
    }

    /// 405, saying which methods are allowed, as HTTP asks.
    pub(super) fn method_not_allowed() -> Response {
        Response {
            allow: true,
            ..Response::text(405, "only GET and HEAD\n")
        }
    }
}

/// What answers the requests.
pub(super) trait Answer: Send + Sync + 'static {
    fn answer(&self, request: &Request) -> Response;
}

/// Why a request's head was not read.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// Longer than [`MAX_HEAD`]: 431.
    TooLarge,
    /// Not whole by its deadline: 408.
    Timeout,
    /// Not HTTP: 400.
    Malformed,
    /// The client closed, or the connection failed: nothing to answer.
    Gone,
}

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading the request: closed at once by a stop.
    Head,
    /// Answering: given a grace period by a stop.
    Answering,
}

#[derive(Debug, Default)]
struct Open {
    /// Each open connection's socket (shared with its thread, to shut it down: one descriptor
    /// per connection) and phase.
    connections: HashMap<u64, (Arc<TcpStream>, Phase)>,
    next: u64,
    stopping: bool,
}

/// The open connections, shared by the accepting thread, the connections' threads and the stop.
#[derive(Debug, Default)]
struct Connections {
    open: Mutex<Open>,
    closed: Condvar,
}

impl Connections {
    fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `stream` in, unless [`MAX_CONNECTIONS`] are open or the server stops.
    fn admit(&self, stream: &Arc<TcpStream>) -> Option<u64> {
        let mut open = self.lock();
        if open.stopping || open.connections.len() >= MAX_CONNECTIONS {
            return None;
        }
        let id = open.next;
        open.next += 1;
        open.connections.insert(id, (stream.clone(), Phase::Head));
        Some(id)
    }

    fn answering(&self, id: u64) {
        if let Some((_, phase)) = self.lock().connections.get_mut(&id) {
            *phase = Phase::Answering;
        }
    }

    fn close(&self, id: u64) {
        self.lock().connections.remove(&id);
        self.closed.notify_all();
    }

    /// Shuts down the connections in `phase` (every one with `None`): a thread reading or writing
    /// on one returns at once.
    fn shut_down(&self, phase: Option<Phase>) {
        for (stream, at) in self.lock().connections.values() {
            if phase.is_none_or(|p| p == *at) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Waits until a connection closes, `timeout` at most.
    fn wait_for_a_close(&self, timeout: Duration) {
        let open = self.lock();
        let _ = self
            .closed
            .wait_timeout(open, timeout)
            .unwrap_or_else(PoisonError::into_inner);
    }

    /// Waits at most `grace` for every connection to close; how many are still open.
    fn wait(&self, grace: Duration) -> usize {
        let open = self.lock();
        let (open, _) = self
            .closed
            .wait_timeout_while(open, grace, |open| !open.connections.is_empty())
            .unwrap_or_else(PoisonError::into_inner);
        open.connections.len()
    }
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
        self.connections.lock().stopping = true;
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
        if connections.lock().stopping {
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
        let Some(id) = connections.admit(&stream) else {
            refuse(&stream);
            continue;
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
                refuse(&stream);
            }
        }
    }
}

/// Answers 503 without waiting: a new connection's send buffer is empty, so the short answer goes
/// at once or not at all.
fn refuse(mut stream: &TcpStream) {
    let _ = stream.set_nonblocking(true);
    let body = "too many connections: try again\n";
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

/// Reads up to the blank line that ends a request's headers, by `deadline`: the head without it.
fn read_head(mut stream: &TcpStream, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(HeadError::Timeout);
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let room = (MAX_HEAD - head.len()).min(chunk.len());
        let read = match stream.read(&mut chunk[..room]) {
            Ok(0) => return Err(HeadError::Gone),
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(HeadError::Timeout)
            }
            Err(_) => return Err(HeadError::Gone),
        };
        // The end may straddle two reads.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..read]);
        if let Some(end) = end_of_head(&head[from..]) {
            head.truncate(from + end);
            return Ok(head);
        }
        if head.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        if head.first().is_some_and(|b| !b.is_ascii_alphabetic()) && head.len() > 1 {
            // Not a request line (TLS, binary): no need to wait for more.
            return Err(HeadError::Malformed);
        }
    }
}

/// Where the blank line ending the headers starts in `bytes` (`\r\n\r\n`, or `\n\n` as RFC 9112
/// lets a server accept): the index of its first line end.
fn end_of_head(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find(|&i| {
        bytes[i] == b'\n'
            && (bytes.get(i + 1) == Some(&b'\n') || bytes.get(i + 1..i + 3) == Some(b"\r\n"))
    })
}

/// The request line and headers, or `None` when they are not HTTP/1.x. Bytes that are not UTF-8
/// (obs-text in a header value) are replaced, not refused.
fn parse_head(head: &[u8], arrived: Instant) -> Option<Request> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_alphabetic())
    {
        return None;
    }
    // The absolute form (`http://host/path`), which HTTP/1.1 servers must accept, names the path
    // after the authority.
    let target = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => {
            rest.find('/').map_or("/", |at| &rest[at..])
        }
        _ => target,
    };
    if !target.starts_with('/') && target != "*" {
        return None;
    }
    let http10 = match version {
        "HTTP/1.0" => true,
        "HTTP/1.1" => false,
        _ => return None,
    };
    let mut headers = Vec::new();
    for line in lines {
        // A continued header (obs-fold) is refused, as RFC 9112 allows.
        if line.starts_with([' ', '\t']) {
            return None;
        }
        let (name, value) = line.split_once(':')?;
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return None;
        }
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    Some(Request {
        arrived,
        method: method.to_owned(),
        path: target.split('?').next().unwrap_or_default().to_owned(),
        http10,
        headers,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// An answer's status line and headers.
fn head(http10: bool, status: u16, content_type: &str, length: usize, allow: bool) -> String {
    let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
    let allow = if allow { "Allow: GET, HEAD\r\n" } else { "" };
    format!(
        "{version} {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\
         {allow}Connection: close\r\n\r\n",
        reason(status)
    )
}

/// Writes `response` within [`WRITE_TIMEOUT`]; a client that went away or does not read is left.
fn write_answer(stream: &TcpStream, http10: bool, head_only: bool, response: &Response) {
    let head = head(
        http10,
        response.status,
        response.content_type,
        response.body.len(),
        response.allow,
    );
    let deadline = Instant::now() + WRITE_TIMEOUT;
    let body = if head_only { "" } else { &response.body };
    let _ = write_by(stream, head.as_bytes(), deadline)
        .and_then(|()| write_by(stream, body.as_bytes(), deadline));
}

/// Writes all of `bytes` by `deadline`.
fn write_by(mut stream: &TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => bytes = &bytes[written..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Ends the answer, then reads what the client still sends (up to [`LINGER_BYTES`], for
/// [`LINGER`] at most) so that closing does not reset the connection under the answer.
fn linger(mut stream: &TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER;
    let mut drained = 0;
    let mut chunk = [0; 4096];
    while drained < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(read) => drained += read,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::{end_of_head, parse_head};

    #[test]
    fn the_head_ends_at_the_first_blank_line() {
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(21));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\nA: b\n\n"), Some(19));
        assert_eq!(end_of_head(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(end_of_head(b"\r\n\r\n"), Some(1));
    }

    #[test]
    fn a_request_line_and_headers_parse() {
        let now = Instant::now();
        let r = parse_head(
            b"GET /metrics?x=1 HTTP/1.0\r\nHost: h\r\nX-Prometheus-Scrape-Timeout-Seconds:  2.5 ",
            now,
        )
        .unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.http10),
            ("GET", "/metrics", true)
        );
        assert_eq!(r.header("x-prometheus-scrape-timeout-seconds"), Some("2.5"));
        assert_eq!(r.header("host"), Some("h"));
        assert_eq!(r.header("other"), None);
        let r = parse_head(b"GET http://exp:9477/metrics HTTP/1.1\r\nX: \xff", now).unwrap();
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.header("x"), Some("\u{fffd}"));
        let r = parse_head(b"GET http://exp:9477 HTTP/1.1", now).unwrap();
        assert_eq!(r.path, "/");
    }

    #[test]
    fn what_is_not_http_1_is_refused() {
        let now = Instant::now();
        for head in [
            &b"GET / HTTP/2.0"[..],
            b"GET /",
            b"GET  / HTTP/1.1",
            b"GET x/ HTTP/1.1",
            b"GET ftp://x/ HTTP/1.1",
            b"GET / HTTP/1.1\r\nno colon",
            b"GET / HTTP/1.1\r\nA: b\r\n folded",
            b"GET / HTTP/1.1\r\nA b: c",
            b"G\xffT / HTTP/1.1",
        ] {
            assert!(parse_head(head, now).is_none(), "{head:?}");
        }
    }
}
