//! Shared test harness: one database per test binary (`DATABASE_URL`, or a `TempPostgres` started on
//! first use), one pool, and unique table names per test so tests run in parallel.
#![allow(dead_code)]

pub mod beliefs;
pub mod campaigns;
pub mod ledger;
pub mod load;
pub mod proxy;
pub mod registry;
pub mod tls;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use pgtenure::postgres::{self, NoTls};
use pgtenure::Db;

/// The database URL the library under test uses: the test database, or with
/// `PGTENURE_TEST_PGBOUNCER=1` a PgBouncer in transaction mode in front of it, or with
/// `PGTENURE_TEST_TLS=1` (and the feature `tls`) a server of its own over TLS, its certificate
/// checked (`sslmode=verify-full`).
pub fn url() -> String {
    if through_tls() {
        return tls_server().1.clone();
    }
    if through_pgbouncer() {
        static BOUNCER: OnceLock<pgtenure::testing::PgBouncer> = OnceLock::new();
        let bouncer = BOUNCER.get_or_init(|| {
            pgtenure::testing::PgBouncer::start(&direct_url())
                .unwrap_or_else(|e| panic!("no PgBouncer: {e}"))
        });
        return bouncer.url().to_owned();
    }
    direct_url()
}

/// Whether this run goes through PgBouncer (`PGTENURE_TEST_PGBOUNCER=1`).
pub fn through_pgbouncer() -> bool {
    std::env::var("PGTENURE_TEST_PGBOUNCER").is_ok_and(|v| v == "1")
}

/// Whether this run goes over TLS (`PGTENURE_TEST_TLS=1`).
pub fn through_tls() -> bool {
    std::env::var("PGTENURE_TEST_TLS").is_ok_and(|v| v == "1")
}

/// The shared TLS server of `PGTENURE_TEST_TLS=1`, and the library's URL for it.
fn tls_server() -> &'static (pgtenure::testing::TempPostgres, String) {
    static SERVER: OnceLock<(pgtenure::testing::TempPostgres, String)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let ca = tls::Authority::new("pgtenure test CA");
        let pg = tls::server(&ca);
        let ca_file = ca.write(pg.dir(), "ca.crt");
        let url = format!(
            "postgres://postgres@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
            pg.port(),
            ca_file.display()
        );
        (pg, url)
    })
}

/// The test database itself (`DATABASE_URL`, or a `TempPostgres`, or the TLS server), for the
/// tests' own checks, without TLS.
pub fn direct_url() -> String {
    if through_tls() {
        return tls_server().0.url().to_owned();
    }
    pgtenure::testing::database_url().unwrap_or_else(|e| panic!("no test database: {e}"))
}

/// The pool shared by the tests of this binary.
pub fn db() -> Db {
    static DB: OnceLock<Db> = OnceLock::new();
    DB.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        let db = built(24);
        if through_tls() {
            let mut conn = db.connection().unwrap();
            assert!(
                tls::encrypted(&mut conn),
                "PGTENURE_TEST_TLS=1: not encrypted"
            );
        }
        db
    })
    .clone()
}

/// A pool of `max_size` on the test database, set up for the pooler and TLS modes.
fn built(max_size: u32) -> Db {
    Db::builder(&url())
        .and_then(|b| b.max_size(max_size))
        .and_then(|b| b.build())
        // Behind PgBouncer a cancel can hit another client's statement: the docs say turn it off.
        .map(|db| db.with_cancel_on_deadline(!through_pgbouncer()))
        .unwrap_or_else(|e| panic!("cannot connect to the test database: {e}"))
}

/// A `Db` of its own (a small pool, nothing read yet), set up as [`db`] is: for a test that needs
/// what a process starting now would see, such as a promotion record changed by hand.
#[allow(dead_code)]
pub fn fresh_db() -> Db {
    built(4)
}

/// `url` with `key=value` added to its query.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{key}={value}")
}

/// The library's URL as a driver config, without the TLS parameters the driver does not know
/// (for the tests that reach the server through a proxy of their own, without TLS).
pub fn url_config() -> postgres::Config {
    let url = url();
    let plain = match url.split_once('?') {
        Some((base, _)) if through_tls() => base.to_owned(),
        _ => url,
    };
    plain.parse().unwrap()
}

/// A fresh connection config for the test database at another address (a proxy): the user,
/// password and database of the harness URL, without TLS (the proxies read the traffic).
/// (`Config::host` adds a host rather than replacing one.)
pub fn config_at(host: &str, port: u16) -> postgres::Config {
    let real = url_config();
    let mut config = postgres::Config::new();
    config
        .host(host)
        .port(port)
        .ssl_mode(postgres::config::SslMode::Disable)
        .user(real.get_user().unwrap_or("postgres"));
    if let Some(dbname) = real.get_dbname() {
        config.dbname(dbname);
    }
    if let Some(password) = real.get_password() {
        config.password(password);
    }
    config
}

/// A plain client for checks the library does not offer (reading rows, DDL, clocks).
pub fn client() -> postgres::Client {
    postgres::Client::connect(&direct_url(), NoTls).expect("test client connects")
}

/// A membership configuration for tests that drive ticks by hand and want claims in the first
/// round: no probation (by default a process counts, and claims, from its second heartbeat).
pub fn hand_driven() -> pgtenure::membership::Config {
    let mut config = pgtenure::membership::Config::default();
    config.warm_up = Some(Duration::ZERO);
    config
}

/// Unique table names for one test, dropped (best effort) when the guard is dropped.
pub struct Tables {
    names: Vec<String>,
}

impl Tables {
    pub fn new() -> Tables {
        Tables { names: Vec::new() }
    }

    /// A fresh table name `t_<what>_<pid>_<n>`; schema-qualified names are passed through `qualified`.
    pub fn name(&mut self, what: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "t_{what}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.names.push(name.clone());
        name
    }

    /// Registers another object (a schema-qualified table) to drop.
    pub fn track(&mut self, qualified: &str) {
        self.names.push(qualified.to_owned());
    }

    /// A fresh table name for every primitive.
    pub fn every_primitive(&mut self) -> Names {
        Names {
            tick: self.name("tick"),
            fire: self.name("fire"),
            lease: self.name("lease"),
            leader: self.name("leader"),
            procs: self.name("procs"),
            units: self.name("units"),
            sema: self.name("sema"),
        }
    }
}

/// A table name for every primitive, from [`Tables::every_primitive`].
pub struct Names {
    pub tick: String,
    pub fire: String,
    pub lease: String,
    pub leader: String,
    pub procs: String,
    pub units: String,
    pub sema: String,
}

impl Drop for Tables {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&direct_url(), NoTls) {
            for name in &self.names {
                // The table, and the sequences and promotion records leases and electors create beside it.
                let _ = c.batch_execute(&format!(
                    "DROP TABLE IF EXISTS {name}, {name}_promotion CASCADE;
                     DROP SEQUENCE IF EXISTS {name}_token_seq, {name}_term_seq"
                ));
            }
        }
    }
}

/// A fresh lease table (and its token sequence), created through the shared pool.
pub fn lease_table(tables: &mut Tables) -> String {
    let table = tables.name("lease");
    pgtenure::leases::Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    table
}

/// A fresh leader table, created.
pub fn leader_table(tables: &mut Tables) -> String {
    let table = tables.name("leader");
    pgtenure::elector::Elector::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    table
}

/// The database clock.
pub fn db_now(c: &mut postgres::Client) -> SystemTime {
    c.query_one("SELECT now()", &[]).unwrap().get(0)
}

/// Waits until `f` returns `Some`, polling every 10 ms, panicking after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        // The poll interval of this bounded wait.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Number of rows in `table`.
pub fn count(c: &mut postgres::Client, table: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .unwrap()
        .get(0)
}

/// Whether `table` exists.
pub fn table_exists(c: &mut postgres::Client, table: &str) -> bool {
    c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .unwrap()
        .get(0)
}

/// Runs `f(i)` on `n` threads released together by a barrier and returns their results in order.
pub fn race<T: Send + 'static>(n: usize, f: impl Fn(usize) -> T + Send + Sync + 'static) -> Vec<T> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, f) = (barrier.clone(), f.clone());
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("racer thread"))
        .collect()
}

/// A role (and its cleanup) whose default isolation is `isolation`.
pub struct Role {
    pub name: String,
}

impl Role {
    pub fn new(tables: &mut Tables, isolation: &str) -> Role {
        let name = tables.name("role");
        client()
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN;
                 ALTER ROLE {name} SET default_transaction_isolation = '{isolation}';"
            ))
            .unwrap();
        Role { name }
    }

    pub fn config(&self, application_name: &str) -> postgres::Config {
        let mut config: postgres::Config = direct_url().parse().unwrap();
        config.user(&self.name);
        config.application_name(application_name);
        config
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&direct_url(), NoTls) {
            // Tried again: its REVOKEs can race another test's GRANT on the same schema ("tuple
            // concurrently updated"), which would leave the role behind.
            for _ in 0..5 {
                let sql = format!("DROP OWNED BY {0}; DROP ROLE {0}", self.name);
                if c.batch_execute(&sql).is_ok() {
                    break;
                }
            }
        }
    }
}

/// A `Leaser::run` loop on a thread of its own; `stop` (or dropping it) signals and joins it.
pub struct Running {
    stop: Option<pgtenure::crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<pgtenure::Result<()>>>,
}

impl Running {
    pub fn start(leaser: std::sync::Arc<pgtenure::membership::Leaser>) -> Running {
        let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::spawn(move || leaser.run(&shutdown));
        Running {
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Signals the loop (as a crash or a shutdown would end it) and joins it; `run` returns `Ok`.
    pub fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            thread
                .join()
                .expect("the run thread")
                .expect("run returns Ok");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A reconciler that does nothing, for leasers whose deliveries a test does not look at.
pub struct Quiet;

impl pgtenure::membership::Reconciler for Quiet {
    fn units_gained(&self, _: &[pgtenure::membership::Unit]) {}
    fn units_lost(&self, _: &[pgtenure::membership::Unit], _: pgtenure::membership::UnitLoss) {}
}

/// Whether something accepts TCP connections on this loopback port (a throwaway server still up).
pub fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// The `pgtenure-<pid>-*` directories of process `pid` in the temporary directory: what its
/// throwaway servers left, if anything.
pub fn temp_dirs_of(pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("pgtenure-{pid}-")))
        })
        .collect()
}
