//! `pgtenure exporter`, the built binary against a real PostgreSQL (`DATABASE_URL`, or a throwaway
//! server): `/metrics` says what the library reports, every family is documented and passes
//! `promtool check metrics`, a database outage shows as `pgtenure_exporter_up 0`, the page renders
//! the fleet in a real headless browser (Debian's `chromium`), and SIGTERM stops it cleanly. The
//! tests that need promtool or chromium fail, naming the package, when it is missing (.ci/run
//! installs both).

mod common;

use common::{db, unique, url};

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgtenure::membership::{Config, Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::postgres::{Client, NoTls};
use pgtenure::testing::TempPostgres;
use pgtenure::{
    elector::Elector,
    leases::{Grant, Leases},
    semaphores::Semaphore,
    tick_claims::TickClaims,
    Db,
};

/// One test's tables, dropped with it.
struct Tables {
    leases: String,
    leader: String,
    ticks: String,
    processes: String,
    units: String,
    semaphores: String,
    url: String,
}

impl Tables {
    fn new(url: &str) -> Tables {
        Tables {
            leases: unique("lease"),
            leader: unique("leader"),
            ticks: unique("tick"),
            processes: unique("procs"),
            units: unique("units"),
            semaphores: unique("sema"),
            url: url.to_owned(),
        }
    }

    fn flags(&self) -> Vec<String> {
        [
            ("--leases-table", &self.leases),
            ("--leader-table", &self.leader),
            ("--ticks-table", &self.ticks),
            ("--processes-table", &self.processes),
            ("--units-table", &self.units),
            ("--semaphores-table", &self.semaphores),
        ]
        .into_iter()
        .flat_map(|(flag, table)| [flag.to_owned(), table.clone()])
        .collect()
    }

    fn units(&self, db: &Db) -> Units {
        Units::new(db)
            .with_tables(&self.processes, &self.units)
            .unwrap()
    }

    fn leaser(&self, db: &Db, hostname: &str) -> Leaser {
        let mut config = Config::default();
        config.warm_up = Some(Duration::ZERO);
        config.hostname = hostname.to_owned();
        Leaser::new(db, Arc::new(Quiet), config)
            .unwrap()
            .with_tables(&self.processes, &self.units)
            .unwrap()
    }
}

impl Drop for Tables {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.url, NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP TABLE IF EXISTS {l}, {e}, {t}, {u}, {p}, {s}, {l}_promotion, {e}_promotion,
                     {s}_promotion CASCADE;
                 DROP SEQUENCE IF EXISTS {l}_token_seq, {e}_term_seq, {u}_token_seq, {s}_token_seq",
                l = self.leases,
                e = self.leader,
                t = self.ticks,
                u = self.units,
                p = self.processes,
                s = self.semaphores,
            ));
        }
    }
}

struct Quiet;

impl Reconciler for Quiet {
    fn units_gained(&self, _: &[Unit]) {}
    fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
}

/// A running exporter on a free port; killed if the test fails before stopping it.
struct Exporter {
    child: Option<Child>,
    addr: SocketAddr,
    stderr: mpsc::Receiver<String>,
}

impl Exporter {
    fn start(url: &str, tables: &Tables, extra: &[&str]) -> Exporter {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgtenure"))
            .args(["--url", url])
            .args(tables.flags())
            .args(["exporter", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stderr) = mpsc::channel();
        let pipe = child.stderr.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // It says where it listens: `... serving http://127.0.0.1:PORT/metrics and ...`.
        let line = stderr
            .recv_timeout(Duration::from_secs(20))
            .expect("the exporter said where it listens");
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Exporter {
            child: Some(child),
            addr,
            stderr,
        }
    }

    /// GET `path`: the status code, the Content-Type and the body.
    fn get(&self, path: &str) -> (u16, String, String) {
        self.get_with(path, "")
    }

    /// GET `path` with more `headers` (lines ending in CRLF).
    fn get_with(&self, path: &str, headers: &str) -> (u16, String, String) {
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            // HTTP/1.0: the whole body, never chunked.
            "GET {path} HTTP/1.0\r\nHost: {}\r\n{headers}\r\n",
            self.addr
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .expect("a status code");
        let content_type = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-type")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default();
        (status, content_type, body.to_owned())
    }

    /// `/metrics`, parsed, with its text.
    fn scrape(&self) -> (Scrape, String) {
        let (status, content_type, body) = self.get("/metrics");
        assert_eq!(status, 200, "{body}");
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        (Scrape::parse(&body), body)
    }

    /// SIGTERM: it exits 0 within 10 s, having said so.
    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        let pid = child.id() as libc::pid_t;
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the exporter did not stop within 10 s of SIGTERM");
            }
            // The poll interval of a bounded wait (10 s) on the exit.
            thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
        let said = self.said_until(Duration::from_secs(10), |said| {
            said.iter().any(|line| line.contains("stopping on SIGTERM"))
        });
        assert!(
            said.iter().any(|line| line.contains("stopping on SIGTERM")),
            "{said:?}"
        );
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A scrape: each sample by `name{labels}` (labels as written, sorted by the encoder), and each
/// family's type.
struct Scrape {
    samples: BTreeMap<String, f64>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    fn parse(text: &str) -> Scrape {
        let mut samples = BTreeMap::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, value) = line.rsplit_once(' ').unwrap();
                samples.insert(series.to_owned(), value.parse().unwrap());
            }
        }
        Scrape { samples, types }
    }

    fn get(&self, series: &str) -> f64 {
        *self
            .samples
            .get(series)
            .unwrap_or_else(|| panic!("no {series} in {:#?}", self.samples))
    }

    /// The series of family `name`.
    fn family(&self, name: &str) -> Vec<(&str, f64)> {
        self.samples
            .iter()
            .filter(|(series, _)| {
                series.as_str() == name || series.starts_with(&format!("{name}{{"))
            })
            .map(|(series, value)| (series.as_str(), *value))
            .collect()
    }
}

/// The families docs/operating.md lists (table rows starting with a metric name).
fn documented() -> BTreeSet<String> {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md"))
            .unwrap();
    docs.lines()
        .filter_map(|line| line.strip_prefix("| `pgtenure_"))
        .map(|rest| format!("pgtenure_{}", rest.split('`').next().unwrap()))
        .collect()
}

/// Seconds from the local clock to `t` (the database runs on this machine: same clock).
fn seconds_until(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => ahead.as_secs_f64(),
        Err(behind) => -behind.duration().as_secs_f64(),
    }
}

fn assert_near(what: &str, seen: f64, expected: f64) {
    assert!(
        (seen - expected).abs() < 3.0,
        "{what}: {seen}, expected about {expected}"
    );
}

/// Runs `program` with `args`, feeding it `input`; fails naming the Debian package when it is not
/// installed.
fn run_tool(program: &str, package: &str, args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {program} ({e}): install the Debian package {package} \
                 (apt-get install -y {package}); .ci/run does"
            )
        });
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The library's metrics, as docs/metrics.md lists them.
fn documented_library_metrics() -> BTreeSet<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md"))
        .unwrap();
    docs.lines()
        .filter_map(|line| line.strip_prefix("| `pgtenure_"))
        .map(|rest| format!("pgtenure_{}", rest.split('`').next().unwrap()))
        .collect()
}

/// docs/alerts.yml passes `promtool check rules`, its tests (docs/alerts.test.yml) pass `promtool
/// test rules`, and every metric it names is one the exporter or the library documents (which the
/// other tests check are the ones reported): a renamed metric cannot leave an alert that never
/// fires.
#[test]
fn the_alert_rules_pass_promtool_and_name_only_documented_metrics() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(docs)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run promtool ({e}): install the Debian package prometheus; .ci/run does")
            });
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules = std::fs::read_to_string(format!("{docs}/alerts.yml")).unwrap();
    let known: BTreeSet<String> = documented()
        .into_iter()
        .chain(documented_library_metrics())
        .collect();
    let mut named = BTreeSet::new();
    for (at, _) in rules.match_indices("pgtenure_") {
        let name: String = rules[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.ends_with('_') {
            // A prefix in a comment (pgtenure_table_*).
            continue;
        }
        // A histogram's series are its family's name with a suffix.
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|family| known.contains(*family))
            .map_or(name.clone(), str::to_owned);
        named.insert(family);
    }
    assert!(
        named.len() >= 10,
        "too few metrics found in the rules: {named:?}"
    );
    let unknown: Vec<&String> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "docs/alerts.yml names undocumented metrics: {unknown:?}"
    );
}

/// `promtool check metrics`, the Prometheus project's own linter, accepts `text`.
fn assert_promtool_accepts(text: &str) {
    let checked = run_tool(
        "promtool",
        "prometheus",
        &["check", "metrics"],
        text.as_bytes(),
    );
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn metrics_match_what_the_library_reports_and_pass_promtool() {
    let tables = Tables::new(&url());
    let ttl = Duration::from_secs(30);
    // Leases: two held (one for 10 s, one for 30 s), one released (a lapsed row).
    let leases = Leases::new(&db())
        .with_table(&tables.leases)
        .unwrap()
        .with_owner("app-a")
        .unwrap();
    leases.create_table().unwrap();
    let soon = leases
        .try_acquire("report/daily", Duration::from_secs(10))
        .unwrap()
        .unwrap();
    let later = leases.try_acquire("cleanup", ttl).unwrap().unwrap();
    let gone = leases.try_acquire("gone", ttl).unwrap().unwrap();
    assert!(leases.release_tenure("gone", gone.token()).unwrap());
    // Leaders: billing led by node-1; reports led, then resigned.
    let elector = |name: &str| {
        Elector::new(&db())
            .with_table(&tables.leader)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder("node-1")
            .unwrap()
    };
    let billing = elector("billing");
    billing.create_table().unwrap();
    assert!(billing.is_leader().unwrap());
    let reports = elector("reports");
    assert!(reports.is_leader().unwrap());
    reports.resign().unwrap();
    // Jobs: rollup busy, vacuum's run over.
    let ticks = TickClaims::new(&db())
        .with_table(&tables.ticks)
        .unwrap()
        .with_owner("worker-1")
        .unwrap();
    ticks.create_table().unwrap();
    let tick = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let rollup = ticks.claim("rollup", tick, ttl).unwrap().unwrap();
    ticks
        .claim("vacuum", tick, ttl)
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    // Membership: six units, one disabled; a claims the five enabled ones, b joins but has not
    // rebalanced yet.
    let units = tables.units(&db());
    units.create_tables().unwrap();
    let registered: Vec<Unit> = (0..6)
        .map(|shard| Unit::new("acme", shard).unwrap())
        .collect();
    units.add(&registered).unwrap();
    assert!(units.set_weight(&registered[5], 0).unwrap());
    let a = tables.leaser(&db(), "host-a");
    a.heartbeat().unwrap();
    a.tick().unwrap();
    assert_eq!(a.owned().len(), 5);
    let b = tables.leaser(&db(), "host-b");
    b.heartbeat().unwrap();

    // Semaphores: export holds 2 permits (of 3), quota 1, partner none (its permit released).
    let semaphore = Semaphore::new(&db())
        .with_table(&tables.semaphores)
        .unwrap();
    semaphore.create_table().unwrap();
    let permits: Vec<_> = [("export", 3), ("export", 3), ("quota", 5), ("partner", 2)]
        .into_iter()
        .map(|(key, n)| semaphore.acquire(key, n, ttl).unwrap().unwrap())
        .collect();
    let mut permits = permits.into_iter();
    let held_permits: Vec<_> = permits.by_ref().take(3).collect();
    permits.next().unwrap().release().unwrap();

    let exporter = Exporter::start(&url(), &tables, &["--max-series", "1"]);
    let (scrape, text) = exporter.scrape();

    // No label Prometheus sets itself on every scraped series (it would rename ours).
    for series in scrape.samples.keys() {
        assert!(
            !series.contains("{job=") && !series.contains(",job=") && !series.contains("instance="),
            "{series}: a label Prometheus owns"
        );
    }

    // Every family documented, and nothing undocumented.
    let families: BTreeSet<String> = scrape.types.keys().cloned().collect();
    assert_eq!(
        families,
        documented(),
        "families scraped vs docs/operating.md"
    );
    assert_eq!(
        scrape.types["pgtenure_exporter_scrape_errors_total"],
        "counter"
    );

    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);
    assert_eq!(scrape.get("pgtenure_exporter_scrape_errors_total"), 0.0);
    for primitive in ["leases", "leader", "membership", "jobs", "semaphores"] {
        let series = format!("pgtenure_exporter_table_present{{primitive=\"{primitive}\"}}");
        assert_eq!(scrape.get(&series), 1.0, "{series}");
    }

    // Leases, against Leases::list: the one closest to lapsing has the only series.
    let listed = leases.list("").unwrap();
    assert_eq!(scrape.get("pgtenure_table_lease_rows"), listed.len() as f64);
    let held: Vec<_> = listed.iter().filter(|l| l.live).collect();
    assert_eq!(held.len(), 2);
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 2.0);
    assert_eq!(scrape.get("pgtenure_table_leases_superseded"), 0.0);
    assert_eq!(scrape.get("pgtenure_table_leases_unlisted"), 1.0);
    let row = leases.holder("report/daily").unwrap().unwrap();
    assert_eq!(row.token, soon.token());
    let expiry = scrape.family("pgtenure_table_lease_expiry_seconds");
    assert_eq!(
        expiry.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        ["pgtenure_table_lease_expiry_seconds{key=\"report/daily\",owner=\"app-a\"}"]
    );
    assert_near(
        "report/daily expiry",
        expiry[0].1,
        seconds_until(row.held_until),
    );
    assert_eq!(
        scrape.get("pgtenure_table_leases_min_expiry_seconds"),
        expiry[0].1
    );
    assert!(later.token() > 0);

    // Semaphores, against Semaphore::list: the busiest key has the only series.
    let listed = semaphore.list("").unwrap();
    assert_eq!(listed.len(), 3);
    assert_eq!(scrape.get("pgtenure_table_semaphore_keys"), 3.0);
    assert_eq!(scrape.get("pgtenure_table_semaphore_permits_held"), 3.0);
    assert_eq!(
        scrape.family("pgtenure_table_semaphore_key_permits_held"),
        [(
            "pgtenure_table_semaphore_key_permits_held{key=\"export\"}",
            2.0
        )]
    );
    assert_eq!(
        scrape.family("pgtenure_table_semaphore_key_slots"),
        [("pgtenure_table_semaphore_key_slots{key=\"export\"}", 2.0)]
    );
    assert_eq!(scrape.get("pgtenure_table_semaphore_keys_unlisted"), 1.0);
    let (code, _, page) = exporter.get("/");
    assert_eq!(code, 200);
    assert!(
        page.contains("<p>3 permits held, on 2 of 3 keys; the keys with the most first</p>")
            && page.contains(
                "<tr data-semaphore=\"export\"><td>export</td><td class=\"num\">2</td><td class=\"num\">2</td></tr>"
            )
            && page.contains("and 1 more keys"),
        "{page}"
    );
    for permit in held_permits {
        permit.release().unwrap();
    }

    // Leaders, against Elector::leaders.
    let leaders = billing.leaders().unwrap();
    assert_eq!(leaders.len(), 2);
    for leader in &leaders {
        let fleet = format!("{{fleet=\"{}\"}}", leader.name);
        assert_eq!(
            scrape.get(&format!("pgtenure_table_leader_present{fleet}")),
            f64::from(leader.live)
        );
        assert_eq!(
            scrape.get(&format!("pgtenure_table_leader_term{fleet}")),
            leader.term as f64
        );
    }
    assert_eq!(
        scrape.get("pgtenure_table_leader_present{fleet=\"billing\"}"),
        1.0
    );
    assert_eq!(
        scrape.get("pgtenure_table_leader_present{fleet=\"reports\"}"),
        0.0
    );
    let led = &leaders[0];
    assert_near(
        "billing tenure",
        scrape.get("pgtenure_table_leader_tenure_seconds{fleet=\"billing\"}"),
        -seconds_until(led.elected_at),
    );
    assert_near(
        "billing expiry",
        scrape.get("pgtenure_table_leader_expiry_seconds{fleet=\"billing\"}"),
        seconds_until(led.expires_at),
    );
    assert_eq!(
        scrape.family("pgtenure_table_leader_tenure_seconds").len(),
        1,
        "only live fleets have a tenure"
    );
    assert_eq!(
        scrape.get("pgtenure_table_leader_info{fleet=\"billing\",holder=\"node-1\"}"),
        1.0
    );

    // Membership, against Units::processes and Units::unowned.
    let processes = units.processes().unwrap();
    assert_eq!(processes.len(), 2);
    assert_eq!(scrape.get("pgtenure_table_processes_live"), 2.0);
    assert_eq!(scrape.get("pgtenure_table_processes_expired"), 0.0);
    for p in &processes {
        let labels = format!("{{hostname=\"{}\",process=\"{}\"}}", p.hostname, p.id);
        assert_eq!(
            scrape.get(&format!("pgtenure_table_process_units{labels}")),
            f64::from(p.units)
        );
        assert_eq!(
            scrape.get(&format!("pgtenure_table_process_weight{labels}")),
            p.weight as f64
        );
    }
    assert_eq!(scrape.get("pgtenure_table_units_spread"), 5.0);
    assert_eq!(scrape.get("pgtenure_table_weight_spread"), 5.0);
    let unowned = units.unowned().unwrap();
    assert_eq!(unowned.units, 0);
    assert_eq!(scrape.get("pgtenure_table_units_unowned"), 0.0);
    assert_eq!(scrape.get("pgtenure_table_units_unowned_weight"), 0.0);

    // Jobs, against TickClaims::jobs.
    let jobs = ticks.jobs().unwrap();
    for job in &jobs {
        let labels = format!("{{job_id=\"{}\"}}", job.job_id);
        assert_eq!(
            scrape.get(&format!("pgtenure_table_job_busy{labels}")),
            f64::from(job.busy)
        );
        assert_near(
            &job.job_id,
            scrape.get(&format!("pgtenure_table_job_last_tick_age_seconds{labels}")),
            -seconds_until(job.tick),
        );
    }
    assert_eq!(
        scrape.get("pgtenure_table_job_busy{job_id=\"rollup\"}"),
        1.0
    );
    assert_eq!(
        scrape.get("pgtenure_table_job_busy{job_id=\"vacuum\"}"),
        0.0
    );

    // The Prometheus project's own linter accepts the text.
    assert_promtool_accepts(&text);

    // The fleet moves, the next scrape follows: b takes its share, a unit freed.
    for _ in 0..3 {
        a.tick().unwrap();
        b.tick().unwrap();
    }
    let (scrape, _) = exporter.scrape();
    let after: Vec<i32> = units.processes().unwrap().iter().map(|p| p.units).collect();
    assert!(after.iter().all(|&n| n == 2 || n == 3), "{after:?}");
    assert_eq!(scrape.get("pgtenure_table_units_spread"), 1.0);

    // Anything but / and /metrics is not found.
    assert_eq!(exporter.get("/nothing").0, 404);
    exporter.stop();
    rollup.release().unwrap();
    for leaser in [a, b] {
        leaser.release().unwrap();
        leaser.delete_process().unwrap();
    }
}

/// A throwaway server of the test's own (to stop or freeze), its tables, and a lease held on it
/// for ten minutes.
fn a_server_holding_a_lease() -> (TempPostgres, Tables, Grant) {
    let server = TempPostgres::start().unwrap();
    let db = Db::connect(server.url()).unwrap();
    let tables = Tables::new(server.url());
    let leases = Leases::new(&db).with_table(&tables.leases).unwrap();
    leases.create_table().unwrap();
    let held = leases
        .try_acquire("k", Duration::from_secs(600))
        .unwrap()
        .unwrap();
    (server, tables, held)
}

#[test]
fn a_database_outage_shows_as_up_0_and_counted_scrape_errors() {
    let (server, tables, _held) = a_server_holding_a_lease();
    let exporter = Exporter::start(server.url(), &tables, &[]);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 1.0);
    assert_eq!(
        scrape.get("pgtenure_exporter_table_present{primitive=\"leader\"}"),
        0.0,
        "a table that does not exist is not a failure"
    );

    // Down for 12 s: long enough for a scrape to wait out the exporter's 5 s pool timeout.
    let port = server.port();
    let server = Arc::new(server);
    let outage = {
        let server = server.clone();
        thread::spawn(move || server.restart_after(Duration::from_secs(12)))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "the server did not stop");
        // The poll interval of a bounded wait (30 s) on the server going down.
        thread::sleep(Duration::from_millis(20));
    }
    let (scrape, text) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 0.0, "{text}");
    assert_eq!(scrape.get("pgtenure_exporter_scrape_errors_total"), 1.0);
    assert!(
        scrape.family("pgtenure_table_leases_held").is_empty(),
        "no stale table families on a failed scrape: {text}"
    );
    let (status, _, page) = exporter.get("/");
    assert_eq!(status, 503, "{page}");
    assert!(page.contains("Cannot read the tables"), "{page}");
    let said = exporter.said_until(Duration::from_secs(10), |said| {
        said.iter().any(|l| l.contains("cannot read the tables"))
    });
    assert!(
        said.iter().any(|l| l.contains("cannot read the tables")),
        "{said:?}"
    );

    // Back: the next scrape reads the tables again; the errors stay counted.
    outage.join().unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let scrape = loop {
        let (scrape, _) = exporter.scrape();
        if scrape.get("pgtenure_exporter_up") == 1.0 {
            break scrape;
        }
        assert!(Instant::now() < deadline, "the exporter did not come back");
        // The poll interval of a bounded wait (30 s) on the exporter answering again.
        thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 1.0);
    assert!(scrape.get("pgtenure_exporter_scrape_errors_total") >= 2.0);
    exporter.stop();
}

/// Every process of `server` stopped (SIGSTOP): connections stay open and nothing answers, as
/// behind a blackholed network or a hung host. Resumed when dropped.
struct Frozen(Vec<libc::pid_t>);

impl Frozen {
    fn server(server: &TempPostgres) -> Frozen {
        let pid_file = std::fs::read_to_string(server.dir().join("data/postmaster.pid")).unwrap();
        let postmaster: libc::pid_t = pid_file.lines().next().unwrap().trim().parse().unwrap();
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<libc::pid_t>() else {
                continue;
            };
            // The parent's pid is the field after the state, after the parenthesised name.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            if after_name.split_whitespace().nth(1) == Some(&postmaster.to_string()) {
                pids.push(pid);
            }
        }
        for &pid in &pids {
            // SAFETY: signalling the test's own server's processes.
            assert_eq!(
                unsafe { libc::kill(pid, libc::SIGSTOP) },
                0,
                "SIGSTOP {pid}"
            );
        }
        Frozen(pids)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        }
    }
}

/// A database that stops answering (every server process stopped: connections open, nothing
/// comes back, as behind a blackholed network, where only the TCP timeouts would end a statement)
/// fails a scrape by its deadline instead of holding it past Prometheus's: `--scrape-timeout`, or
/// the timeout Prometheus sends less half a second. The exporter answers again once the database
/// does, and SIGTERM stops it though a read still waits.
#[test]
fn a_database_that_stops_answering_fails_the_scrape_by_its_deadline() {
    let (server, tables, _held) = a_server_holding_a_lease();
    let exporter = Exporter::start(server.url(), &tables, &["--scrape-timeout", "2s"]);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);

    let frozen = Frozen::server(&server);
    let (scrape, text) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 0.0, "{text}");
    assert_eq!(scrape.get("pgtenure_exporter_scrape_errors_total"), 1.0);
    let waited = scrape.get("pgtenure_exporter_scrape_duration_seconds");
    assert!(
        (2.0..4.0).contains(&waited),
        "waited {waited} s for a 2 s deadline"
    );
    let said = exporter.said_until(Duration::from_secs(10), |said| {
        said.iter().any(|l| l.contains("did not answer within"))
    });
    assert!(
        said.iter().any(|l| l.contains("did not answer within")),
        "{said:?}"
    );
    // Prometheus says it gives up after 1.5 s: the exporter answers after 1 s.
    let (status, _, body) =
        exporter.get_with("/metrics", "X-Prometheus-Scrape-Timeout-Seconds: 1.5\r\n");
    assert_eq!(status, 200);
    let scrape = Scrape::parse(&body);
    assert_eq!(scrape.get("pgtenure_exporter_up"), 0.0, "{body}");
    let waited = scrape.get("pgtenure_exporter_scrape_duration_seconds");
    assert!(
        (1.0..1.5).contains(&waited),
        "waited {waited} s for Prometheus's 1.5 s"
    );
    let (status, _, page) = exporter.get("/");
    assert_eq!(status, 503, "{page}");

    // Answering again: so does the exporter (the read that waited ends, or a new one).
    drop(frozen);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (scrape, _) = exporter.scrape();
        if scrape.get("pgtenure_exporter_up") == 1.0 {
            assert_eq!(scrape.get("pgtenure_table_leases_held"), 1.0);
            break;
        }
        assert!(Instant::now() < deadline, "the exporter did not come back");
        // The poll interval of a bounded wait (30 s) on the exporter answering again.
        thread::sleep(Duration::from_millis(100));
    }

    // Stopped again, with a read waiting on it: SIGTERM still ends the exporter.
    let frozen = Frozen::server(&server);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 0.0);
    exporter.stop();
    drop(frozen);
}

/// Where the page's screenshot is kept: target/exporter-page.png.
fn artifact(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join(name)
}

#[test]
fn the_page_renders_the_fleet_in_a_headless_browser() {
    let tables = Tables::new(&url());
    let units = tables.units(&db());
    units.create_tables().unwrap();
    let registered: Vec<Unit> = (0..12)
        .map(|shard| Unit::new("acme", shard).unwrap())
        .collect();
    units.add(&registered).unwrap();
    // Unbalanced: a claimed every unit before b and c joined; none has rebalanced since.
    let a = tables.leaser(&db(), "host-a");
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let b = tables.leaser(&db(), "host-<b>");
    b.heartbeat().unwrap();
    let c = tables.leaser(&db(), "host-c");
    c.heartbeat().unwrap();
    // Six more that nobody has claimed yet: the fair share counts them (18 units for 3).
    let waiting: Vec<Unit> = (12..18)
        .map(|shard| Unit::new("acme", shard).unwrap())
        .collect();
    units.add(&waiting).unwrap();
    // A lease whose key is markup: shown as text, never as an element.
    let leases = Leases::new(&db()).with_table(&tables.leases).unwrap();
    leases.create_table().unwrap();
    let _held = leases
        .try_acquire("<script>alert(1)</script>", Duration::from_secs(600))
        .unwrap()
        .unwrap();
    let elector = Elector::new(&db())
        .with_table(&tables.leader)
        .unwrap()
        .with_name("billing")
        .unwrap()
        .with_holder("node-1")
        .unwrap();
    elector.create_table().unwrap();
    assert!(elector.is_leader().unwrap());

    let exporter = Exporter::start(&url(), &tables, &[]);
    let page = format!("http://{}/", exporter.addr);
    let dom = run_tool(
        "chromium",
        "chromium",
        &[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            &page,
        ],
        b"",
    );
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8(dom.stdout).unwrap();
    // Each process a row with a bar as wide as its share of the most loaded.
    let processes = units.processes().unwrap();
    assert_eq!(processes.len(), 3);
    for p in &processes {
        let row = dom
            .split("<tr ")
            .find(|row| row.contains(&format!("data-process=\"{}\"", p.id)))
            .unwrap_or_else(|| panic!("no row for {} in:\n{dom}", p.id));
        let width = f64::from(p.units) * 100.0 / 12.0;
        assert!(
            row.contains(&format!("data-units=\"{}\"", p.units))
                && row.contains(&format!("width: {width:.1}%")),
            "{} owns {} units: {row}",
            p.hostname,
            p.units
        );
    }
    assert_eq!(
        processes.iter().map(|p| p.units).collect::<Vec<_>>(),
        [12, 0, 0]
    );
    // The dashed line at the fair share, 6 of 18 units: a above it, b and c below.
    for (p, bar) in processes.iter().zip(["bar over", "bar under", "bar under"]) {
        let row = dom
            .split("<tr ")
            .find(|row| row.contains(&format!("data-process=\"{}\"", p.id)))
            .unwrap();
        assert!(
            row.contains("title=\"fair share: 6.0 units\" style=\"left: 50.0%\"")
                && row.contains(&format!("class=\"{bar}\"")),
            "{}: {row}",
            p.hostname
        );
    }
    assert!(dom.contains("6 units unowned"), "{dom}");
    assert!(dom.contains("host-&lt;b&gt;"), "{dom}");
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dom}"
    );
    assert!(!dom.contains("<script>"), "{dom}");
    assert!(dom.contains("1 of 1 fleet led"), "{dom}");
    assert!(dom.contains("spread 12 units"), "{dom}");
    assert!(dom.contains("http-equiv=\"refresh\""), "{dom}");

    // The screenshot, kept for a person to look at.
    let shot = artifact("exporter-page.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = format!("--screenshot={}", shot.display());
    let out = run_tool(
        "chromium",
        "chromium",
        &[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,760",
            &screenshot,
            &page,
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{}",
        shot.display()
    );
    exporter.stop();
    for leaser in [a, b, c] {
        leaser.release().unwrap();
        leaser.delete_process().unwrap();
    }
}

#[test]
fn exporter_checks_its_arguments_before_it_connects() {
    let down = "postgres://postgres@127.0.0.1:1/nowhere";
    for args in [
        &["exporter", "--listen", "nonsense"][..],
        &["exporter", "--listen", "127.0.0.1:99999"],
        &["exporter", "--listen", ""],
        &["exporter", "--refresh", "0"],
        &["exporter", "--scrape-timeout", "0s"],
        &["exporter", "--scrape-timeout", "soon"],
        &["--watch", "exporter"],
        &["--leases-table", "bad name", "exporter"],
    ] {
        let started = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_pgtenure"))
            .args(["--url", down])
            .args(args)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: exit {:?} after {:?}: {stderr}",
            out.status.code(),
            started.elapsed()
        );
    }
}

/// The cost of a scrape against 100,000 units (20 live processes) and 10,000 held leases, for
/// docs/operating.md: run with `cargo test --release -p pgtenure-cli --test exporter --
/// --ignored --nocapture scrape_cost`. The tables are made by the library, then filled with SQL
/// (claiming 100,000 units tick by tick would take minutes).
#[test]
#[ignore = "a measurement; run by hand for docs/operating.md"]
fn scrape_cost_at_100000_units_and_10000_leases() {
    let tables = Tables::new(&url());
    let leases = Leases::new(&db()).with_table(&tables.leases).unwrap();
    leases.create_table().unwrap();
    let units = tables.units(&db());
    units.create_tables().unwrap();
    let all: Vec<Unit> = (0..100_000)
        .map(|i| Unit::new(&format!("tenant-{}", i / 100), i % 100).unwrap())
        .collect();
    for chunk in all.chunks(10_000) {
        units.add(chunk).unwrap();
    }
    let leasers: Vec<Leaser> = (0..20)
        .map(|i| tables.leaser(&db(), &format!("host-{i}")))
        .collect();
    for leaser in &leasers {
        leaser.heartbeat().unwrap();
    }
    let mut client = Client::connect(&url(), NoTls).unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO {l} (key, owner, token, acquired_at, held_until)
               SELECT 'key-' || i, 'owner-' || (i % 50), i, now(), now() + interval '10 min'
                 FROM generate_series(1, 10000) i;
             WITH p AS (SELECT process_id, row_number() OVER (ORDER BY process_id) - 1 AS n
                          FROM {p})
             UPDATE {u} u SET process_id = p.process_id, claimed_at = now()
               FROM p WHERE abs(hashtext(u.tenant || u.shard)) % 1000 <> 0
                        AND p.n = abs(hashtext(u.tenant || '/' || u.shard)) % 20;
             UPDATE {p} p SET unit_count = c.n, weight = c.n
               FROM (SELECT process_id, count(*) AS n FROM {u} GROUP BY process_id) c
              WHERE c.process_id = p.process_id;
             ANALYZE {l}; ANALYZE {u}; ANALYZE {p}",
            l = tables.leases,
            u = tables.units,
            p = tables.processes,
        ))
        .unwrap();
    let exporter = Exporter::start(&url(), &tables, &[]);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 10_000.0);
    assert_eq!(scrape.get("pgtenure_table_processes_live"), 20.0);
    let unowned = units.unowned().unwrap();
    assert!(unowned.units > 0);
    assert_eq!(
        scrape.get("pgtenure_table_units_unowned"),
        unowned.units as f64
    );
    let measure = |what: &str| {
        let mut reads = Vec::new();
        let mut round_trips = Vec::new();
        let mut last = String::new();
        for _ in 0..20 {
            let started = Instant::now();
            let (scrape, text) = exporter.scrape();
            round_trips.push(started.elapsed().as_secs_f64());
            reads.push(scrape.get("pgtenure_exporter_scrape_duration_seconds"));
            last = text;
        }
        reads.sort_by(f64::total_cmp);
        round_trips.sort_by(f64::total_cmp);
        let scrape = Scrape::parse(&last);
        println!(
            "scrape at {what}: read median {:.1} ms (max {:.1} ms), HTTP round trip median \
             {:.1} ms (max {:.1} ms), {} bytes, {} series",
            reads[10] * 1e3,
            reads[19] * 1e3,
            round_trips[10] * 1e3,
            round_trips[19] * 1e3,
            last.len(),
            scrape.samples.len()
        );
    };
    measure("100,000 units and 10,000 leases");
    // A hundred times the leases (a key per tenant and file, say), 990,000 more held: the scrape
    // still sends 1,000 of them.
    client
        .batch_execute(&format!(
            "INSERT INTO {l} (key, owner, token, acquired_at, held_until)
               SELECT 'more-' || i, 'owner-' || (i % 50), i, now(), now() + interval '10 min'
                 FROM generate_series(1, 990000) i;
             ANALYZE {l}",
            l = tables.leases,
        ))
        .unwrap();
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 1_000_000.0);
    measure("100,000 units and 1,000,000 leases");
    exporter.stop();
    for leaser in leasers {
        leaser.delete_process().unwrap();
    }
}

/// Clients that ask for a large page and never read it (a stuck scraper, a browser tab behind a
/// dead link) hold no request thread: another scrape is answered meanwhile, and SIGTERM still
/// stops the exporter within its bound.
#[test]
fn clients_that_never_read_block_neither_scrapes_nor_shutdown() {
    let tables = Tables::new(&url());
    let leases = Leases::new(&db()).with_table(&tables.leases).unwrap();
    leases.create_table().unwrap();
    // 4,000 held leases with 1,000-byte keys: a page of several megabytes, more than the
    // loopback's socket buffers hold.
    let mut client = Client::connect(&url(), NoTls).unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO {l} (key, owner, token, acquired_at, held_until)
               SELECT lpad(i::text, 1000, 'k'), 'owner', i, now(), now() + interval '10 min'
                 FROM generate_series(1, 4000) i",
            l = tables.leases,
        ))
        .unwrap();
    let exporter = Exporter::start(&url(), &tables, &["--max-series", "4000"]);
    // More stuck clients than the exporter has request threads, each seen receiving its answer
    // (so its request was taken) and then never reading on.
    let stuck: Vec<TcpStream> = (0..4)
        .map(|i| {
            let mut stream = TcpStream::connect(exporter.addr).unwrap();
            write!(stream, "GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            let mut first = [0; 1];
            let peeked = stream.peek(&mut first);
            assert!(
                matches!(peeked, Ok(1)),
                "stuck client {i} got no answer within 30 s: {peeked:?}"
            );
            stream
        })
        .collect();
    let mut stream = TcpStream::connect(exporter.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut response = Vec::new();
    let read = stream.read_to_end(&mut response);
    assert!(
        read.is_ok() && response.starts_with(b"HTTP/1.0 200"),
        "a scrape beside stuck clients: {read:?} after {} bytes",
        response.len()
    );
    exporter.stop();
    drop(stuck);
}

/// Text from the database that Prometheus's format must escape (quotes, backslashes, newlines,
/// non-ASCII) in every label: the scrape still passes promtool and says each value back.
#[test]
fn awkward_label_values_are_escaped_for_prometheus() {
    let tables = Tables::new(&url());
    let odd = "a \"quoted\" \\ back\nslash é ✓";
    let leases = Leases::new(&db())
        .with_table(&tables.leases)
        .unwrap()
        .with_owner(odd)
        .unwrap();
    leases.create_table().unwrap();
    let _held = leases
        .try_acquire(odd, Duration::from_secs(600))
        .unwrap()
        .unwrap();
    let elector = Elector::new(&db())
        .with_table(&tables.leader)
        .unwrap()
        .with_name(odd)
        .unwrap()
        .with_holder(odd)
        .unwrap();
    elector.create_table().unwrap();
    assert!(elector.is_leader().unwrap());
    let ticks = TickClaims::new(&db())
        .with_table(&tables.ticks)
        .unwrap()
        .with_owner(odd)
        .unwrap();
    ticks.create_table().unwrap();
    let tick = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let _run = ticks
        .claim(odd, tick, Duration::from_secs(600))
        .unwrap()
        .unwrap();
    let units = tables.units(&db());
    units.create_tables().unwrap();
    let leaser = tables.leaser(&db(), odd);
    leaser.heartbeat().unwrap();

    let exporter = Exporter::start(&url(), &tables, &[]);
    let (scrape, text) = exporter.scrape();
    assert_promtool_accepts(&text);
    let escaped = "a \\\"quoted\\\" \\\\ back\\nslash é ✓";
    assert_eq!(
        scrape.get(&format!(
            "pgtenure_table_leader_info{{fleet=\"{escaped}\",holder=\"{escaped}\"}}"
        )),
        1.0
    );
    assert_eq!(
        scrape.get(&format!("pgtenure_table_job_busy{{job_id=\"{escaped}\"}}")),
        1.0
    );
    assert_eq!(
        scrape
            .family("pgtenure_table_lease_expiry_seconds")
            .iter()
            .filter(|(series, _)| series
                .contains(&format!("key=\"{escaped}\",owner=\"{escaped}\"")))
            .count(),
        1,
        "{text}"
    );
    assert_eq!(
        scrape
            .family("pgtenure_table_process_units")
            .iter()
            .filter(|(series, _)| series.contains(&format!("hostname=\"{escaped}\"")))
            .count(),
        1,
        "{text}"
    );
    exporter.stop();
    leaser.delete_process().unwrap();
}

/// A method other than GET and HEAD is refused with 405 and the `Allow` header HTTP asks of it;
/// HEAD answers the head of GET.
#[test]
fn other_methods_are_refused_naming_those_allowed() {
    let tables = Tables::new(&url());
    let exporter = Exporter::start(&url(), &tables, &[]);
    let ask = |request: &str| {
        let mut stream = TcpStream::connect(exporter.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    };
    let refused = ask("POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.0 405"), "{refused}");
    assert!(
        refused
            .lines()
            .any(|line| line.eq_ignore_ascii_case("allow: GET, HEAD")),
        "{refused}"
    );
    let head = ask("HEAD /metrics HTTP/1.0\r\n\r\n");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
    exporter.stop();
}

/// Sends `request` to `addr` and reads the whole answer (the exporter closes every connection
/// after its answer), waiting `timeout` at most; how long that took from before the connection.
fn ask(addr: SocketAddr, request: &str, timeout: Duration) -> (Duration, Result<String, String>) {
    let sent = Instant::now();
    let answer = (|| {
        let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        stream
            .write_all(request.as_bytes())
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .map_err(|e| format!("{e} after {answer:?}"))?;
        Ok(answer)
    })();
    (sent.elapsed(), answer)
}

/// `n` requests sent at once (a thread each, released together): each one's time from its
/// sending to its whole answer, and the answer.
fn at_once(addr: SocketAddr, n: usize, request: &str) -> Vec<(Duration, Result<String, String>)> {
    let start = Arc::new(std::sync::Barrier::new(n));
    let askers: Vec<_> = (0..n)
        .map(|_| {
            let start = start.clone();
            let request = request.to_owned();
            thread::spawn(move || {
                start.wait();
                ask(addr, &request, Duration::from_secs(60))
            })
        })
        .collect();
    askers.into_iter().map(|a| a.join().unwrap()).collect()
}

/// Many scrapes at once while the database hangs (two Prometheus replicas and a browser, or
/// fifty clients): each is answered `pgtenure_exporter_up 0` by its own deadline counted from its
/// arrival (2 s: Prometheus's 2.5 s less half a second), never after the requests before it. The
/// exporter once answered two at a time, each deadline counted from when a thread took the
/// request: three at once took 8, 8 and 16 s with the defaults.
#[test]
fn concurrent_scrapes_of_a_hung_database_are_each_answered_by_their_own_deadline() {
    let (server, tables, _held) = a_server_holding_a_lease();
    let exporter = Exporter::start(server.url(), &tables, &[]);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);

    let frozen = Frozen::server(&server);
    let request = "GET /metrics HTTP/1.0\r\nX-Prometheus-Scrape-Timeout-Seconds: 2.5\r\n\r\n";
    // The deadline, and slack for a loaded 2-core machine.
    let bound = Duration::from_millis(2000 + 1500);
    for n in [3, 50] {
        let answers = at_once(exporter.addr, n, request);
        let slowest = answers.iter().map(|(took, _)| *took).max().unwrap();
        eprintln!(
            "{n} requests at once against a hung database: the slowest answered after {slowest:?}"
        );
        for (i, (took, answer)) in answers.iter().enumerate() {
            let answer = answer
                .as_ref()
                .unwrap_or_else(|e| panic!("request {i} of {n} at once, after {took:?}: {e}"));
            assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
            assert!(
                answer.contains("\npgtenure_exporter_up 0\n"),
                "request {i} of {n}: {answer}"
            );
            assert!(
                *took < bound,
                "request {i} of {n} at once was answered after {took:?}, past its 2 s deadline"
            );
        }
    }
    // The page too, by the same deadline.
    let (took, page) = ask(
        exporter.addr,
        "GET / HTTP/1.0\r\nX-Prometheus-Scrape-Timeout-Seconds: 2.5\r\n\r\n",
        Duration::from_secs(60),
    );
    let page = page.unwrap();
    assert!(page.starts_with("HTTP/1.0 503"), "{page}");
    assert!(took < bound, "the page took {took:?}");
    // SIGTERM while the read still hangs and more requests wait: within its bound.
    let waiting: Vec<_> = (0..10)
        .map(|_| {
            let addr = exporter.addr;
            thread::spawn(move || {
                ask(
                    addr,
                    "GET /metrics HTTP/1.0\r\n\r\n",
                    Duration::from_secs(60),
                )
            })
        })
        .collect();
    exporter.stop();
    for waiter in waiting {
        let (took, answer) = waiter.join().unwrap();
        // Answered `up 0` at the stop, refused as the stop began (accepted just before it), or
        // refused once the listener closed.
        if let Ok(answer) = answer {
            assert!(
                answer.is_empty()
                    || answer.contains("\npgtenure_exporter_up 0\n")
                    || (answer.starts_with("HTTP/1.1 503") && answer.contains("is stopping")),
                "{answer}"
            );
        }
        assert!(took < Duration::from_secs(10), "a request waited {took:?}");
    }
    drop(frozen);
}

impl Exporter {
    /// What the exporter says on stderr from now, until `enough` holds of it or `timeout` passes.
    fn said_until(&self, timeout: Duration, enough: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut said = Vec::new();
        while !enough(&said) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => said.push(line),
                Err(_) => break,
            }
        }
        said
    }

    /// The exporter's resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let pid = self.child.as_ref().unwrap().id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"))
    }
}

/// A header line that never ends is not buffered: the exporter reads 8 KiB of request line and
/// headers at most, answers 431 and closes, so the client cannot send on and the exporter's
/// memory does not grow (it once grew by the bytes sent, 130 MB for 128 MB). Other scrapes are
/// answered meanwhile.
#[test]
fn a_header_that_never_ends_is_cut_off_at_8_kib() {
    let tables = Tables::new(&url());
    let exporter = Exporter::start(&url(), &tables, &[]);
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);
    let before = exporter.rss_kib();

    let mut endless = TcpStream::connect(exporter.addr).unwrap();
    endless
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    endless
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        .unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let limit = 64 << 20;
    let mut sent = 0;
    let cut = loop {
        if sent >= limit {
            break None;
        }
        match endless.write(&chunk) {
            Ok(written) => sent += written,
            Err(e) => break Some(e),
        }
    };
    let grown = exporter.rss_kib().saturating_sub(before);
    eprintln!(
        "an endless header line: cut off after {sent} bytes sent, the exporter grew by {grown} KiB"
    );
    // What the client sent before the close reached it sat in the sockets' buffers, not in the
    // exporter.
    assert!(
        matches!(
            cut.as_ref().map(std::io::Error::kind),
            Some(std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
        ),
        "the exporter took {sent} bytes of one header line without closing: {cut:?}"
    );
    assert!(
        grown < 16 * 1024,
        "the exporter grew by {grown} KiB while a client sent {sent} bytes of one header line"
    );

    // A head just over the bound, then silence: answered 431.
    let (_, answer) = ask(
        exporter.addr,
        &format!("GET / HTTP/1.1\r\nX-Long: {}\r\n\r\n", "b".repeat(9 * 1024)),
        Duration::from_secs(20),
    );
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);
    exporter.stop();
}

/// Opens a connection to `addr` and sends half a request (no blank line ends it).
fn half_a_request(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    stream
}

/// Clients that send half a request and stall (slowloris) hold nothing for ever: a scrape beside
/// 200 of them is answered at once, each is answered 408 and closed 5 s after it connected, and
/// beyond 512 open connections one more is refused at once (503) rather than queued. The exporter
/// once kept every one of them, a thread each, for ever.
#[test]
fn stalled_clients_are_cut_off_and_hold_up_no_scrape() {
    let tables = Tables::new(&url());
    let exporter = Exporter::start(&url(), &tables, &[]);
    let opened = Instant::now();
    let stalled: Vec<TcpStream> = (0..200).map(|_| half_a_request(exporter.addr)).collect();
    let asked = Instant::now();
    let (scrape, _) = exporter.scrape();
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0);
    let took = asked.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "a scrape beside stalled clients took {took:?}"
    );

    for (i, mut stream) in stalled.into_iter().enumerate() {
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut answer = String::new();
        let read = stream.read_to_string(&mut answer);
        assert!(
            read.is_ok() && answer.starts_with("HTTP/1.1 408"),
            "stalled client {i}, after {:?}: {read:?} {answer:?}",
            opened.elapsed()
        );
    }
    // The header timeout (5 s) with slack: cut off, not left for ever.
    let took = opened.elapsed();
    assert!(
        (Duration::from_millis(4900)..Duration::from_secs(9)).contains(&took),
        "the stalled clients were cut off after {took:?}"
    );

    // The bound: 512 open at once, the next refused at once.
    let held: Vec<TcpStream> = (0..512).map(|_| half_a_request(exporter.addr)).collect();
    let (took, answer) = ask(
        exporter.addr,
        "GET /metrics HTTP/1.0\r\n\r\n",
        Duration::from_secs(30),
    );
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(took < Duration::from_secs(2), "refused after {took:?}");
    // Gone, they free their places.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, answer) = ask(
            exporter.addr,
            "GET /metrics HTTP/1.0\r\n\r\n",
            Duration::from_secs(30),
        );
        if answer.as_ref().is_ok_and(|a| a.starts_with("HTTP/1.0 200")) {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {answer:?}");
        // A bounded wait on a state (the exporter answering again), polled.
        thread::sleep(Duration::from_millis(50));
    }
    exporter.stop();
}

/// Drops the schemas and the role of a test, and what they hold.
struct Grants {
    url: String,
    schemas: Vec<String>,
    role: String,
}

impl Drop for Grants {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.url, NoTls) {
            for schema in &self.schemas {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
            }
            let _ = c.batch_execute(&format!("DROP ROLE IF EXISTS {}", self.role));
        }
    }
}

/// A table the exporter's role may not read is an error, never an absent table: without USAGE on
/// the schema of its search path that holds it (PostgreSQL then hides the table: "relation does
/// not exist", 42P01) or without SELECT on it (42501), the scrape says
/// `pgtenure_exporter_table_readable 0` beside `table_present 1`, stderr and the page say why
/// with the SQLSTATE, and no `pgtenure_table_*` family of that table is shown. The exporter once
/// reported `up 1` and `table_present 0` for every hidden table: a healthy, empty fleet.
#[test]
fn a_table_the_role_may_not_read_is_an_error_not_an_absent_table() {
    let tables = Tables::new(&url());
    let hidden = unique("hidden");
    let closed = unique("closed");
    let role = unique("blind");
    let grants = Grants {
        url: url(),
        schemas: vec![hidden.clone(), closed.clone()],
        role: role.clone(),
    };
    let mut admin = Client::connect(&url(), NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {hidden}; CREATE SCHEMA {closed}; CREATE ROLE {role} LOGIN;
             GRANT USAGE ON SCHEMA {closed} TO {role};
             ALTER ROLE {role} SET search_path = {hidden}, {closed}"
        ))
        .unwrap();
    // The leases in a schema the role cannot use, the leader in one it can, without SELECT.
    let leases = Leases::new(&db())
        .with_table(&format!("{hidden}.{}", tables.leases))
        .unwrap();
    leases.create_table().unwrap();
    let elector = Elector::new(&db())
        .with_table(&format!("{closed}.{}", tables.leader))
        .unwrap();
    elector.create_table().unwrap();
    let sep = if url().contains('?') { '&' } else { '?' };
    let as_role = format!("{}{sep}user={role}", url());
    let exporter = Exporter::start(&as_role, &tables, &[]);

    let (scrape, text) = exporter.scrape();
    let series = |name: &str, primitive: &str| format!("{name}{{primitive=\"{primitive}\"}}");
    for primitive in ["leases", "leader"] {
        assert_eq!(
            scrape.get(&series("pgtenure_exporter_table_present", primitive)),
            1.0,
            "{primitive}: {text}"
        );
        assert_eq!(
            scrape.get(&series("pgtenure_exporter_table_readable", primitive)),
            0.0,
            "{primitive}: {text}"
        );
    }
    for primitive in ["membership", "jobs"] {
        assert_eq!(
            scrape.get(&series("pgtenure_exporter_table_present", primitive)),
            0.0
        );
        assert!(
            !scrape
                .samples
                .contains_key(&series("pgtenure_exporter_table_readable", primitive)),
            "an absent table has no readable series: {text}"
        );
    }
    assert!(
        scrape.family("pgtenure_table_leases_held").is_empty(),
        "{text}"
    );
    assert!(
        scrape.family("pgtenure_table_lease_rows").is_empty(),
        "{text}"
    );
    // The database answered: the exporter is up, and the alert is on the table.
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0, "{text}");
    // The exporter says it before it answers; the lines reach the test through a pipe and a
    // thread, so they are waited for.
    let said = exporter.said_until(Duration::from_secs(10), |said| {
        [&tables.leases, &tables.leader].iter().all(|table| {
            said.iter()
                .any(|l| l.contains(&format!("cannot read table {table} ")))
        })
    });
    let line = |table: &str| {
        said.iter()
            .find(|l| l.contains(&format!("cannot read table {table} ")))
            .unwrap_or_else(|| panic!("nothing said of {table}: {said:?}"))
    };
    let of_leases = line(&tables.leases);
    assert!(
        of_leases.contains("42501")
            && of_leases.contains(&format!("no USAGE on schema {hidden}"))
            && of_leases.contains("42P01"),
        "{of_leases}"
    );
    let of_leader = line(&tables.leader);
    assert!(
        of_leader.contains("permission denied for table") && of_leader.contains("42501"),
        "{of_leader}"
    );
    let (status, _, page) = exporter.get("/");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("id=\"leases-denied\""), "{page}");
    assert!(page.contains("id=\"leaders-denied\""), "{page}");

    // Granted: read, and empty.
    admin
        .batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {hidden} TO {role};
             GRANT SELECT ON ALL TABLES IN SCHEMA {hidden}, {closed} TO {role}"
        ))
        .unwrap();
    let (scrape, text) = exporter.scrape();
    for primitive in ["leases", "leader"] {
        assert_eq!(
            scrape.get(&series("pgtenure_exporter_table_readable", primitive)),
            1.0,
            "{primitive}: {text}"
        );
    }
    assert_eq!(scrape.get("pgtenure_table_leases_held"), 0.0);
    exporter.stop();
    drop(grants);
}

/// A table older than this pgtenure reads (its version record says 1, the leases table needs 3)
/// is unreadable, not a failed scrape: `pgtenure_exporter_table_readable 0` beside
/// `table_present 1`, and stderr says to run the migrations; once migrated it is read.
#[test]
fn a_table_at_an_older_schema_version_is_unreadable_until_migrated() {
    let tables = Tables::new(&url());
    let leases = Leases::new(&db()).with_table(&tables.leases).unwrap();
    leases.create_table().unwrap();
    let mut admin = Client::connect(&url(), NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "COMMENT ON TABLE {} IS 'pgtenure: leases table, schema version 1'",
            tables.leases
        ))
        .unwrap();
    let exporter = Exporter::start(&url(), &tables, &[]);
    let (scrape, text) = exporter.scrape();
    let series = |name: &str| format!("{name}{{primitive=\"leases\"}}");
    assert_eq!(scrape.get("pgtenure_exporter_up"), 1.0, "{text}");
    assert_eq!(
        scrape.get(&series("pgtenure_exporter_table_present")),
        1.0,
        "{text}"
    );
    assert_eq!(
        scrape.get(&series("pgtenure_exporter_table_readable")),
        0.0,
        "{text}"
    );
    let said = exporter.said_until(Duration::from_secs(10), |said| {
        said.iter()
            .any(|l| l.contains(&format!("cannot read table {} ", tables.leases)))
    });
    let line = said
        .iter()
        .find(|l| l.contains(&format!("cannot read table {} ", tables.leases)))
        .unwrap();
    assert!(
        line.contains("schema version 1") && line.contains("pgtenure migrate"),
        "{line}"
    );
    leases.create_table().unwrap();
    let (scrape, text) = exporter.scrape();
    assert_eq!(
        scrape.get(&series("pgtenure_exporter_table_readable")),
        1.0,
        "{text}"
    );
    exporter.stop();
}
