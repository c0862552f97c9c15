//! `pgtenure exporter`: serves `/metrics` (the Prometheus text format) and `/` (a status page)
//! from pgtenure's tables, read afresh for each request (requests that arrive during a read share
//! it), each answered within its own deadline counted from its arrival: the fleet-wide view that
//! no single process has. Runs until SIGINT or SIGTERM (or SIGHUP, SIGQUIT), then answers the
//! requests in hand (giving them [`WRITE_GRACE`]) and exits 0. The HTTP server ([`http`]) bounds
//! what a client can hold: the request's size and time to arrive, the open connections, the time
//! to write an answer.

mod http;
mod metrics;
mod page;
mod reader;
mod snapshot;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use pgtenure::Db;

use self::http::{Answer, Request, Response, Server};
use self::metrics::Counters;
use self::reader::{Read, Reader};
use self::snapshot::{TableNames, Tables};
use crate::signals::{signal_name, Signals};
use crate::{duration, Failure, Global};

/// Where the exporter listens unless `--listen` says.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

/// What a scrape's deadline leaves for the answer to reach Prometheus, from the timeout Prometheus
/// sends (`X-Prometheus-Scrape-Timeout-Seconds`); at most half of it.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// How long shutdown gives the answers in hand (then cut off).
const WRITE_GRACE: Duration = Duration::from_secs(5);

#[derive(Args, Debug)]
pub(crate) struct ExporterArgs {
    /// The address to serve on, HOST:PORT (0.0.0.0:9477 for every interface).
    #[arg(long, default_value = DEFAULT_LISTEN, value_parser = parse_listen)]
    listen: SocketAddr,
    /// At most this many held leases get a series (and a row on the page) of their own, those
    /// closest to lapsing; the rest are counted in pgtenure_table_leases_held and
    /// pgtenure_table_leases_unlisted. So many semaphore keys too, those with the most held
    /// permits (the rest in pgtenure_table_semaphore_keys_unlisted).
    #[arg(long, default_value_t = 1000)]
    max_series: usize,
    /// How often the status page reloads itself, in whole seconds, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_refresh)]
    refresh: Duration,
    /// How long a request waits for the tables, from its arrival, e.g. 8s: then /metrics answers
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

/// What the connections' threads share.
#[derive(Debug)]
struct Exporter {
    reader: Reader,
    counters: Counters,
    refresh: Duration,
    scrape_timeout: Duration,
}

impl ExporterArgs {
    pub(crate) fn run(&self, db: &Db, global: &Global) -> Result<u8, Failure> {
        let tables = Tables {
            db: db.clone(),
            leases: global.leases(db)?,
            elector: global.elector(db)?,
            ticks: global.ticks(db)?,
            units: global.units(db)?,
            semaphores: global.semaphores(db)?,
            names: TableNames {
                leases: global.leases_table.clone(),
                leader: global.leader_table.clone(),
                ticks: global.ticks_table.clone(),
                processes: global.processes_table.clone(),
                units: global.units_table.clone(),
                semaphores: global.semaphores_table.clone(),
            },
            soonest: self.max_series,
        };
        let exporter = Arc::new(Exporter {
            reader: Reader::start(tables)?,
            counters: Counters::default(),
            refresh: self.refresh,
            scrape_timeout: self.scrape_timeout,
        });
        let signals = Signals::install()?;
        let server = Server::bind(self.listen)
            .map_err(|e| format!("cannot listen on {}: {e}", self.listen))?;
        let listening = server.addr();
        let running = server.start(exporter.clone())?;
        say!("pgtenure: exporter serving http://{listening}/metrics and http://{listening}/");
        let signal = signals.received.recv().ok();
        say!(
            "pgtenure: exporter stopping on {}",
            signal.map_or_else(|| "a lost signal thread".to_owned(), signal_name)
        );
        // The requests waiting for the tables are answered at once (up 0: the exporter stops).
        let left = running.stop(WRITE_GRACE, || exporter.reader.release());
        if left > 0 {
            say!("pgtenure: exporter: cut off {left} answers to clients that did not read them");
        }
        // The reading thread stops with the last reference, after the read in flight.
        drop(exporter);
        Ok(0)
    }
}

impl Answer for Exporter {
    /// Answers one request: GET (or HEAD) `/metrics` or `/`; anything else is refused.
    fn answer(&self, request: &Request) -> Response {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET" | "HEAD", "/metrics") => self.metrics(request),
            ("GET" | "HEAD", "/") => self.page(request),
            ("GET" | "HEAD", _) => Response::text(404, "not found: try / or /metrics\n"),
            _ => Response::method_not_allowed(),
        }
    }
}

impl Exporter {
    /// How long `request` may wait for the tables from its arrival: `--scrape-timeout`, or less
    /// when Prometheus says its scrape times out sooner.
    fn wait_for(&self, request: &Request) -> Duration {
        let prometheus = request
            .header("X-Prometheus-Scrape-Timeout-Seconds")
            .and_then(|value| value.parse::<f64>().ok())
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .map(|timeout| timeout.saturating_sub(ANSWER_MARGIN).max(timeout / 2));
        match prometheus {
            Some(timeout) => self.scrape_timeout.min(timeout),
            None => self.scrape_timeout,
        }
    }

    /// Reads the tables by `request`'s deadline, counted from its arrival: the read, and how
    /// long it took (or, failed, how long the request waited). A failure is counted; the reader
    /// says why on stderr, once per read.
    fn read(&self, request: &Request) -> (Read, f64) {
        let (read, took) = self.reader.read(request.arrived + self.wait_for(request));
        if read.is_err() {
            self.counters.scrape_errors.inc();
            return (read, request.arrived.elapsed().as_secs_f64());
        }
        (read, took.as_secs_f64())
    }

    /// `/metrics`: always 200, with `pgtenure_exporter_up` 0 when the read failed (as
    /// postgres_exporter's `pg_up`), so Prometheus keeps the exporter's own series.
    fn metrics(&self, request: &Request) -> Response {
        let (read, took) = self.read(request);
        let body = metrics::render(read.as_ref().as_ref().map_err(|_| ()), &self.counters, took);
        Response::new(200, metrics::CONTENT_TYPE, body)
    }

    /// `/`: the page, or 503 saying why the tables cannot be read.
    fn page(&self, request: &Request) -> Response {
        match &*self.read(request).0 {
            Ok(snapshot) => Response::new(
                200,
                page::CONTENT_TYPE,
                page::render(snapshot, self.refresh),
            ),
            Err(e) => Response::new(503, page::CONTENT_TYPE, page::failed(e, self.refresh)),
        }
    }
}
