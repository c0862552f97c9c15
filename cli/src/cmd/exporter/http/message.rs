//! The wire: a request's head read within its limits and parsed, an answer written within its
//! deadline, and the client's unread bytes drained before the close.

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The most bytes of request line and headers read from a request; a longer head is answered 431.
pub(super) const MAX_HEAD: usize = 8 * 1024;

/// How long writing an answer may take; a client that does not read it by then is cut off.
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// After an answer, how long unread bytes the client sent are drained before the connection
/// closes (closing with unread bytes would reset it, and the client could lose the answer).
const LINGER: Duration = Duration::from_millis(500);

/// The most bytes drained after an answer.
const LINGER_BYTES: usize = 64 * 1024;

/// A request's line and the headers the exporter reads.
#[derive(Debug)]
pub(crate) struct Request {
    /// When its connection was accepted: its deadline counts from here.
    pub(crate) arrived: Instant,
    pub(crate) method: String,
    /// The path, without the query.
    pub(crate) path: String,
    /// Whether the client speaks HTTP/1.0 (answered in kind).
    pub(super) http10: bool,
    headers: Vec<(String, String)>,
}

impl Request {
    /// The first header named `name` (case-insensitively), trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An answer: a status, a content type and a body (left out for HEAD).
#[derive(Debug)]
pub(crate) struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
    /// `Allow: GET, HEAD` (with 405).
    allow: bool,
}

impl Response {
    pub(crate) fn new(status: u16, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            body,
            allow: false,
        }
    }

    /// Plain text.
    pub(crate) fn text(status: u16, body: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body.to_owned())
    }

    /// 405, saying which methods are allowed, as HTTP asks.
    pub(crate) fn method_not_allowed() -> Response {
        Response {
            allow: true,
            ..Response::text(405, "only GET and HEAD\n")
        }
    }
}

/// Why a request's head was not read.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HeadError {
    /// Longer than [`MAX_HEAD`]: 431.
    TooLarge,
    /// Not whole by its deadline: 408.
    Timeout,
    /// Not HTTP: 400.
    Malformed,
    /// The client closed, or the connection failed: nothing to answer.
    Gone,
}

/// Reads up to the blank line that ends a request's headers, by `deadline`: the head without it.
pub(super) fn read_head(mut stream: &TcpStream, deadline: Instant) -> Result<Vec<u8>, HeadError> {
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
pub(super) fn end_of_head(bytes: &[u8]) -> Option<usize> {
    (0..bytes.len()).find(|&i| {
        bytes[i] == b'\n'
            && (bytes.get(i + 1) == Some(&b'\n') || bytes.get(i + 1..i + 3) == Some(b"\r\n"))
    })
}

/// The request line and headers, or `None` when they are not HTTP/1.x. Bytes that are not UTF-8
/// (obs-text in a header value) are replaced, not refused.
pub(super) fn parse_head(head: &[u8], arrived: Instant) -> Option<Request> {
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
pub(super) fn head(
    http10: bool,
    status: u16,
    content_type: &str,
    length: usize,
    allow: bool,
) -> String {
    let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
    let allow = if allow { "Allow: GET, HEAD\r\n" } else { "" };
    format!(
        "{version} {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\
         {allow}Connection: close\r\n\r\n",
        reason(status)
    )
}

/// Writes `response` within [`WRITE_TIMEOUT`]; a client that went away or does not read is left.
pub(super) fn write_answer(stream: &TcpStream, http10: bool, head_only: bool, response: &Response) {
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
pub(super) fn linger(mut stream: &TcpStream) {
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
