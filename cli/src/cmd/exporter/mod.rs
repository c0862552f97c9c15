//! `pgtenure exporter`: serves `/metrics` (the Prometheus text format) and `/` (a status page)
//! from pgtenure's tables, read afresh for each request (requests that arrive during a read share
//! it), within a deadline: the fleet-wide view that no single process has. Runs until SIGINT or
//! SIGTERM (or SIGHUP, SIGQUIT), then finishes the requests in hand (giving the answers still
//! being written [`WRITE_GRACE`]) and exits 0.

mod metrics;
mod page;
mod reader;
mod snapshot;

use std::io::Cursor;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use pgtenure::Db;
use tiny_http::{Header, Method, Request, Response, Server};

use self::metrics::Counters;
use self::reader::{Read, Reader};
use self::snapshot::Tables;
use crate::signals::{signal_name, Signals};
use crate::{duration, Failure, Global};

/// Where the exporter listens unless `--listen` says.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

/// Threads answering requests: a scrape and a page view at once.
const WORKERS: usize = 2;

/// What a scrape's deadline leaves for the answer to reach Prometheus, from the timeout Prometheus
/// sends (`X-Prometheus-Scrape-Timeout-Seconds`); at most half of it.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// Answers written at once, each on a thread of its own (a client that does not read holds its
/// writer, never a request thread); beyond them a request is answered 503.
const WRITERS: usize = 64;

/// How long shutdown waits for the answers still being written.
const WRITE_GRACE: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub(crate) struct ExporterArgs {
    /// The address to serve on, HOST:PORT (0.0.0.0:9477 for every interface).
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    listen: SocketAddr,
    /// At most this many held leases get a series (and a row on the page) of their own, those
    /// closest to lapsing; the rest are counted in pgtenure_table_leases_held and
    /// pgtenure_table_leases_unlisted.
    #[arg(long, default_value_t = 1000)]
    max_series: usize,
    /// How often the status page reloads itself, in whole seconds, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_refresh)]
    refresh: Duration,
    /// How long a request waits for the tables, e.g. 8s: then /metrics answers
    /// pgtenure_exporter_up 0 and the page 503. Shorter when Prometheus sends a shorter scrape
    /// timeout (less half a second).
    #[arg(long, default_value = "8s", value_parser = parse_scrape_timeout)]
    scrape_timeout: Duration,
}

/// `HOST:PORT`, a host name resolved now: a usage error when it does not parse or resolve.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let mut addrs = text.to_socket_addrs().map_err(|e| {
        format!("{text:?} is not an address to listen on, HOST:PORT such as 127.0.0.1:9477 ({e})")
    })?;
    addrs
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

/// A page refresh: whole seconds (what `<meta http-equiv="refresh">` takes), at least one.
fn parse_refresh(text: &str) -> Result<Duration, String> {
    let refresh = duration::parse(text)?;
    if refresh < Duration::from_secs(1) || refresh.subsec_nanos() != 0 {
        return Err(format!(
            "{text:?}: the page refreshes every whole number of seconds, 1s or more"
        ));
    }
    Ok(refresh)
}

/// A scrape timeout: 100 ms or more.
fn parse_scrape_timeout(text: &str) -> Result<Duration, String> {
    duration::at_least_100ms("the scrape timeout", text)
}

/// What the request threads share.
#[derive(Debug)]
struct Exporter {
    reader: Reader,
    counters: Counters,
    refresh: Duration,
    scrape_timeout: Duration,
    writing: Arc<Writing>,
}

/// The answers being written.
#[derive(Debug, Default)]
struct Writing {
    count: Mutex<usize>,
    done: Condvar,
}

impl Writing {
    /// Counts one more answer being written, unless [`WRITERS`] are.
    fn start(&self) -> bool {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        if *count >= WRITERS {
            return false;
        }
        *count += 1;
        true
    }

    fn finished(&self) {
        let mut count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        *count -= 1;
        self.done.notify_all();
    }

    /// Waits at most `grace` for every answer to be written; the number still being written.
    fn wait(&self, grace: Duration) -> usize {
        let count = self.count.lock().unwrap_or_else(PoisonError::into_inner);
        let (count, _) = self
            .done
            .wait_timeout_while(count, grace, |count| *count > 0)
            .unwrap_or_else(PoisonError::into_inner);
        *count
    }
}

impl ExporterArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let tables = Tables {
            db: db.clone(),
            leases: global.leases(db)?,
            elector: global.elector(db)?,
            ticks: global.ticks(db)?,
            units: global.units(db)?,
            soonest: self.max_series,
        };
        let exporter = Arc::new(Exporter {
            reader: Reader::start(tables)?,
            counters: Counters::default(),
            refresh: self.refresh,
            scrape_timeout: self.scrape_timeout,
            writing: Arc::default(),
        });
        let signals = Signals::install()?;
        let server = Server::http(self.listen)
            .map_err(|e| format!("cannot listen on {}: {e}", self.listen))?;
        let server = Arc::new(server);
        let listening = server
            .server_addr()
            .to_ip()
            .map_or_else(|| self.listen.to_string(), |addr| addr.to_string());
        say!("pgtenure: exporter serving http://{listening}/metrics and http://{listening}/");
        let mut workers = Vec::with_capacity(WORKERS);
        for _ in 0..WORKERS {
            let server = server.clone();
            let exporter = exporter.clone();
            let worker = thread::Builder::new()
                .name("pgtenure-http".into())
                .spawn(move || {
                    // Ends when unblocked at shutdown.
                    while let Ok(request) = server.recv() {
                        exporter.answer(request);
                    }
                })?;
            workers.push(worker);
        }
        let signal = signals.received.recv().ok();
        say!(
            "pgtenure: exporter stopping on {}",
            signal.map_or_else(|| "a lost signal thread".to_owned(), signal_name)
        );
        // One unblock per thread waiting in recv; a thread answering a request finishes it first.
        for _ in &workers {
            server.unblock();
        }
        for worker in workers {
            let _ = worker.join();
        }
        // A client that never reads its answer does not hold the exit: its writer is left.
        let left = exporter.writing.wait(WRITE_GRACE);
        if left > 0 {
            say!("pgtenure: exporter: left {left} answers unwritten to clients that do not read");
        }
        // The reading thread stops with the last reference, after the read in flight.
        drop(exporter);
        Ok(0)
    }
}

impl Exporter {
    /// Answers one request: GET (or HEAD) `/metrics` or `/`; anything else is refused.
    fn answer(&self, request: Request) {
        let path = request
            .url()
            .split('?')
            .next()
            .unwrap_or_default()
            .to_owned();
        let deadline = Instant::now() + self.wait_for(&request);
        let response = match (request.method(), path.as_str()) {
            (Method::Get | Method::Head, "/metrics") => self.metrics(deadline),
            (Method::Get | Method::Head, "/") => self.page(deadline),
            (Method::Get | Method::Head, _) => text(
                404,
                "text/plain; charset=utf-8",
                "not found: try / or /metrics\n",
            ),
            // HTTP asks a 405 to say what is allowed.
            _ => text(405, "text/plain; charset=utf-8", "only GET and HEAD\n").with_header(
                Header::from_bytes(&b"Allow"[..], &b"GET, HEAD"[..]).expect("a valid header"),
            ),
        };
        self.send(request, response);
    }

    /// Writes `response` on a thread of its own: a client that does not read it holds that
    /// thread, not this one. Beyond [`WRITERS`] at once, a short 503 is written here.
    fn send(&self, request: Request, response: Response<Cursor<Vec<u8>>>) {
        if !self.writing.start() {
            let busy = text(
                503,
                "text/plain; charset=utf-8",
                "too many answers being written to clients that do not read\n",
            );
            let _ = request.respond(busy);
            return;
        }
        let writing = self.writing.clone();
        let spawned = thread::Builder::new()
            .name("pgtenure-http-write".into())
            .spawn(move || {
                // A client that went away: nothing to do.
                let _ = request.respond(response);
                writing.finished();
            });
        if spawned.is_err() {
            // The request was dropped with the closure (tiny_http answers it 500).
            self.writing.finished();
        }
    }

    /// How long `request` may wait for the tables: `--scrape-timeout`, or less when Prometheus
    /// says its scrape times out sooner.
    fn wait_for(&self, request: &Request) -> Duration {
        let prometheus = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("X-Prometheus-Scrape-Timeout-Seconds"))
            .and_then(|h| h.value.as_str().trim().parse::<f64>().ok())
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .map(|timeout| timeout.saturating_sub(ANSWER_MARGIN).max(timeout / 2));
        match prometheus {
            Some(timeout) => self.scrape_timeout.min(timeout),
            None => self.scrape_timeout,
        }
    }

    /// Reads the tables by `deadline`; a failure is counted and said on stderr.
    fn read(&self, deadline: Instant) -> (Read, f64) {
        let (read, took) = self.reader.read(deadline);
        if let Err(e) = &*read {
            self.counters.scrape_errors.inc();
            say!("pgtenure: exporter: cannot read the tables: {e}");
        }
        (read, took.as_secs_f64())
    }

    /// `/metrics`: always 200, with `pgtenure_exporter_up` 0 when the read failed (as
    /// postgres_exporter's `pg_up`), so Prometheus keeps the exporter's own series.
    fn metrics(&self, deadline: Instant) -> Response<std::io::Cursor<Vec<u8>>> {
        let (read, took) = self.read(deadline);
        let body = metrics::render(read.as_ref().as_ref().map_err(|_| ()), &self.counters, took);
        text(200, metrics::CONTENT_TYPE, &body)
    }

    /// `/`: the page, or 503 saying why the tables cannot be read.
    fn page(&self, deadline: Instant) -> Response<std::io::Cursor<Vec<u8>>> {
        match &*self.read(deadline).0 {
            Ok(snapshot) => text(
                200,
                page::CONTENT_TYPE,
                &page::render(snapshot, self.refresh),
            ),
            Err(e) => text(503, page::CONTENT_TYPE, &page::failed(e, self.refresh)),
        }
    }
}

fn text(status: u16, content_type: &str, body: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    let header =
        Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes()).expect("a valid header");
    Response::from_string(body)
        .with_status_code(status)
        .with_header(header)
}
