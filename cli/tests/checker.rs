//! The `lease-run` checker: several `pgtenure lease-run` processes (the built binary) contend for
//! two keys with short TTLs while faults hit them at random, and the command under each lease
//! records when it runs. Afterwards no command may have run beside another holder of its key.
//!
//! Faults: `kill -9`, SIGHUP and SIGTERM to the pgtenure that holds a key, its database backends
//! killed (`pg_terminate_backend`), the key force-released; a third of the runs have a dead stderr
//! (a pipe whose reader is gone, so every write fails with EPIPE). Busy threads load the CPUs in
//! bursts (`PGTENURE_CHECKER_LOAD` of them, default 2) so that ordering races show on two cores.
//! Half the commands daemonize: their loop runs in a worker started by `setsid -f` (out of CMD's
//! process group and session, its parent gone), and the command then waits or exits at once; such
//! a run gets SIGTERM where another would get `kill -9` (a `kill -9` of pgtenure leaves a daemonized
//! worker running: documented).
//!
//! What is checked. Every command (a bash loop, or its daemonized worker) writes a line with the
//! time (`$EPOCHREALTIME`) every 20 ms to a file named after its key and fencing token, and first
//! its own pid and pgtenure's. A trigger on the leases table logs every change of a key's token with the
//! database's `clock_timestamp()`: the grants, and the force releases (which give the row a fresh
//! token). The tenure of token t ends at the next token change of its key, at G. Then:
//! - if its pgtenure had exited by G (it was killed, got a signal, its command ended, ...), the
//!   command must have stopped before G: it never runs while another holder holds the key;
//! - if the key changed hands while its pgtenure ran (a force release, or a lapse: renewals that
//!   failed until the lease's local deadline), that is a loss, and the documented bound applies:
//!   the loss is seen within the TTL (a third of it when the renewal is answered), and the command
//!   is stopped within `--grace` after that. Its last sign of life must be before G + TTL + grace.
//!
//! And no command may still run once every pgtenure has exited. The database runs on this machine
//! (its clock is ours); the offset between the two clocks is measured anyway and applied.
//!
//! Length: `PGTENURE_CHECKER_SECS` seconds (default 20), e.g.
//! `PGTENURE_CHECKER_SECS=600 cargo test -p pgtenure-cli --test checker -- --nocapture`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgtenure::postgres::{Client, NoTls};
use pgtenure::{leases::Leases, Db};

const KEYS: [&str; 2] = ["k0", "k1"];
/// pgtenure processes at a time, one per worker thread.
const WORKERS: usize = 4;

/// The command: its pid and pgtenure's, then a line with the time every 20 ms until it has run
/// `$2` microseconds (or is stopped). `$1` is the directory of the heartbeat files.
///
/// With `$3` `daemon` or `daemon-exit` it is a daemonizing command: the loop runs in a worker that
/// `setsid -f` started (a session and group of its own, its parent gone), which gets pgtenure's pid
/// as `$4`; the command then sleeps as long as the worker runs (`daemon`) or exits at once
/// (`daemon-exit`).
const SCRIPT: &str = r#"
f="$1/hb-$PGTENURE_LEASE_KEY-$PGTENURE_LEASE_TOKEN"
case "$3" in
daemon|daemon-exit)
    setsid -f bash -c "$BASH_EXECUTION_STRING" bash "$1" "$2" worker "$PPID" \
        </dev/null >/dev/null 2>&1
    [ "$3" = daemon-exit ] && exit 0
    exec sleep "$(($2 / 1000000)).$(printf %06d $(($2 % 1000000)))"
esac
echo "start $$ ${4:-$PPID} $EPOCHREALTIME" >> "$f"
start=${EPOCHREALTIME/./}
while :; do
    now=$EPOCHREALTIME
    echo "beat $now" >> "$f"
    (( ${now/./} - start >= $2 )) && exit 0
    sleep 0.02
done
"#;

fn run_for() -> Duration {
    let secs = std::env::var("PGTENURE_CHECKER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// A small xorshift generator: the test needs variety, not quality.
struct Rng(u64);

impl Rng {
    fn new(salt: u64) -> Rng {
        Rng((now_us() as u64
            ^ (u64::from(std::process::id()) << 32)
            ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

/// Busy threads that load the CPUs in bursts until dropped (as the library's checker does).
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start() -> Load {
        let n: u64 = std::env::var("PGTENURE_CHECKER_LOAD")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2);
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let stop = stop.clone();
                thread::spawn(move || {
                    let mut rng = Rng::new(31 + i);
                    let mut x = 0_u64;
                    while !stop.load(Ordering::Relaxed) {
                        let until = Instant::now() + rng.millis(20, 400);
                        while Instant::now() < until {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                        }
                        std::hint::black_box(x);
                        // Real time is the subject: CPU load in bursts, idle 0-150 ms between.
                        thread::sleep(rng.millis(0, 150));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// This machine's wall clock in microseconds since the epoch (the commands' `$EPOCHREALTIME`).
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

fn us(d: Duration) -> i64 {
    d.as_micros() as i64
}

fn url() -> String {
    pgtenure::testing::database_url().unwrap_or_else(|e| panic!("no test database: {e}"))
}

/// The leases table, the token-change log and its trigger, and the heartbeat directory; dropped
/// with the guard.
struct Env {
    leases: String,
    log: String,
    dir: PathBuf,
}

impl Env {
    fn new(db: &Db) -> Env {
        let leases = format!("t_cli_checker_{}", std::process::id());
        let env = Env {
            log: format!("{leases}_log"),
            dir: std::env::temp_dir().join(&leases),
            leases,
        };
        std::fs::create_dir_all(&env.dir).unwrap();
        Leases::new(db)
            .with_table(&env.leases)
            .unwrap()
            .create_table()
            .unwrap();
        // Every change of a key's token (a grant, a force release) with the time it was made.
        client()
            .batch_execute(&format!(
                "CREATE TABLE {log} (key text NOT NULL, token bigint NOT NULL, at_us bigint NOT NULL);
                 CREATE FUNCTION {log}_fn() RETURNS trigger LANGUAGE plpgsql AS $f$
                 BEGIN
                     IF TG_OP = 'INSERT' OR NEW.token IS DISTINCT FROM OLD.token THEN
                         INSERT INTO {log} VALUES
                             (NEW.key, NEW.token, (extract(epoch FROM clock_timestamp()) * 1e6)::bigint);
                     END IF;
                     RETURN NULL;
                 END $f$;
                 CREATE TRIGGER {log}_trigger AFTER INSERT OR UPDATE ON {leases}
                     FOR EACH ROW EXECUTE FUNCTION {log}_fn();",
                log = env.log,
                leases = env.leases,
            ))
            .unwrap();
        env
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&url(), NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP TABLE IF EXISTS {l}, {l}_promotion, {g} CASCADE;
                 DROP SEQUENCE IF EXISTS {l}_token_seq;
                 DROP FUNCTION IF EXISTS {g}_fn()",
                l = self.leases,
                g = self.log,
            ));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn client() -> Client {
    Client::connect(&url(), NoTls).expect("the test database")
}

/// The database clock minus ours, in microseconds, from the round trip that was quickest.
fn clock_offset(c: &mut Client) -> i64 {
    (0..5)
        .map(|_| {
            let before = now_us();
            let db: i64 = c
                .query_one(
                    "SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint",
                    &[],
                )
                .unwrap()
                .get(0);
            let after = now_us();
            (after - before, db - (before + after) / 2)
        })
        .min()
        .unwrap()
        .1
}

/// One `pgtenure lease-run`.
struct Run {
    pid: libc::pid_t,
    key: &'static str,
    /// Its `application_name`, to kill its backends by.
    app: String,
    ttl: Duration,
    grace: Duration,
    dead_stderr: bool,
    /// Its command daemonizes its heartbeat loop (`setsid -f`).
    daemonizing: bool,
    /// When it was started (our clock, µs): pids are reused over a long run.
    started: i64,
    /// When it exited (our clock, as seen by polling: a little late) and how.
    exited: Option<(i64, ExitStatus)>,
}

/// Every run, by owner name (`--owner`), which is what the lease row shows.
type Runs = Arc<Mutex<HashMap<String, Run>>>;

fn send(pid: libc::pid_t, signal: i32) {
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Whether `pid` runs (exists and is not a zombie).
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X') | None)
    })
}

/// One worker: pgtenure lease-run after pgtenure lease-run until `until`.
fn worker(n: usize, url: &str, env_leases: &str, dir: &Path, runs: &Runs, until: Instant) {
    let mut rng = Rng::new(n as u64);
    let mut seq = 0;
    while Instant::now() < until {
        seq += 1;
        let owner = format!("w{n}-{seq}");
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let ttl = rng.millis(1000, 2000);
        let grace = rng.millis(300, 1000);
        let wait = rng.millis(0, 3000);
        // Half the commands run until something stops them: one that outlives its pgtenure then
        // shows for sure.
        let runs_for = if rng.below(2) == 0 {
            rng.millis(300, 3000)
        } else {
            Duration::from_secs(60)
        };
        let dead_stderr = rng.below(3) == 0;
        // Half the commands daemonize their loop: half of those then wait, half exit at once.
        let shape = ["plain", "plain", "daemon", "daemon-exit"][rng.below(4) as usize];
        let app = format!("{env_leases}_w{n}");
        let joint = if url.contains('?') { '&' } else { '?' };
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgtenure"))
            .args(["--url", &format!("{url}{joint}application_name={app}")])
            .args([
                "--leases-table",
                env_leases,
                "lease-run",
                key,
                "--owner",
                &owner,
            ])
            .args(["--ttl", &format!("{}ms", ttl.as_millis())])
            .args(["--grace", &format!("{}ms", grace.as_millis())])
            .args(["--wait", &format!("{}ms", wait.as_millis())])
            .args(["--", "bash", "-c", SCRIPT, "bash"])
            .arg(dir)
            .arg(us(runs_for).to_string())
            .arg(shape)
            .env_remove("DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(if dead_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap();
        // A log shipper that died: every write to pgtenure's stderr fails with EPIPE.
        drop(child.stderr.take());
        runs.lock().unwrap().insert(
            owner.clone(),
            Run {
                pid: child.id() as libc::pid_t,
                key,
                app,
                ttl,
                grace,
                dead_stderr,
                daemonizing: shape != "plain",
                started: now_us(),
                exited: None,
            },
        );
        // The SIGTERM loop at the end of the run bounds this wait.
        let status = child.wait().unwrap();
        runs.lock().unwrap().get_mut(&owner).unwrap().exited = Some((now_us(), status));
    }
}

/// Random faults on whoever holds a key, until `until`; their counts by kind.
fn inject_faults(leases: &Leases, runs: &Runs, until: Instant) -> BTreeMap<&'static str, u64> {
    let mut rng = Rng::new(99);
    let mut admin = client();
    let mut faults = BTreeMap::new();
    while Instant::now() < until {
        // Real time is the subject: a fault every 300-900 ms.
        thread::sleep(rng.millis(300, 900));
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        let Ok(Some(row)) = leases.holder(key) else {
            continue;
        };
        if !row.live {
            continue;
        }
        let Some((pid, app, dead_stderr, daemonizing)) = runs
            .lock()
            .unwrap()
            .get(&row.owner)
            .filter(|run| run.exited.is_none())
            .map(|run| (run.pid, run.app.clone(), run.dead_stderr, run.daemonizing))
        else {
            continue;
        };
        // A holder with a dead stderr gets a loss more often: that is when pgtenure writes.
        let fault = if dead_stderr && rng.below(2) == 0 {
            4
        } else {
            rng.below(5)
        };
        // A `kill -9` of pgtenure leaves a daemonized worker running, as documented (the
        // parent-death signal reaches CMD only): a daemonizing run gets SIGTERM instead.
        let fault = if fault == 0 && daemonizing { 2 } else { fault };
        let kind = match fault {
            0 => {
                send(pid, libc::SIGKILL);
                "kill -9"
            }
            1 => {
                send(pid, libc::SIGHUP);
                "SIGHUP"
            }
            2 => {
                send(pid, libc::SIGTERM);
                "SIGTERM"
            }
            3 => {
                let _ = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1",
                    &[&app],
                );
                "kill backends"
            }
            _ => {
                let _ = leases.force_release(key);
                "force release"
            }
        };
        *faults.entry(kind).or_default() += 1;
    }
    faults
}

/// What one command's heartbeat file says.
struct Beats {
    key: String,
    token: i64,
    pid: libc::pid_t,
    ppid: libc::pid_t,
    /// Its last sign of life (our clock, µs).
    last: i64,
}

fn beats(dir: &Path) -> Vec<Beats> {
    let parse_us = |s: &str| s.replace('.', "").parse::<i64>().ok();
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some((key, token)) = name
            .strip_prefix("hb-")
            .and_then(|rest| rest.rsplit_once('-'))
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let mut b = Beats {
            key: key.to_owned(),
            token: token.parse().unwrap(),
            pid: 0,
            ppid: 0,
            last: 0,
        };
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["start", pid, ppid, at] => {
                    b.pid = pid.parse().unwrap_or(0);
                    b.ppid = ppid.parse().unwrap_or(0);
                    b.last = b.last.max(parse_us(at).unwrap_or(0));
                }
                ["beat", at] => b.last = b.last.max(parse_us(at).unwrap_or(0)),
                // A line cut short by SIGKILL.
                _ => {}
            }
        }
        all.push(b);
    }
    all
}

#[test]
fn lease_run_never_runs_its_command_beside_another_holder() {
    let length = run_for();
    let db = Db::connect(&url()).expect("the test database");
    let env = Env::new(&db);
    let leases = Leases::new(&db).with_table(&env.leases).unwrap();
    let offset = clock_offset(&mut client());
    let runs: Runs = Arc::default();
    let load = Load::start();
    let until = Instant::now() + length;
    let url = url();
    let faults = thread::scope(|s| {
        for n in 0..WORKERS {
            let (url, table, dir, runs) = (&url, &env.leases, &env.dir, &runs);
            s.spawn(move || worker(n, url, table, dir, runs, until));
        }
        let faults = inject_faults(&leases, &runs, until);
        // The last runs: stopped as an operator would, through pgtenure.
        let stop_by = Instant::now() + Duration::from_secs(30);
        loop {
            let running: Vec<libc::pid_t> = runs
                .lock()
                .unwrap()
                .values()
                .filter(|run| run.exited.is_none())
                .map(|run| run.pid)
                .collect();
            if running.is_empty() {
                break;
            }
            assert!(
                Instant::now() < stop_by,
                "pgtenure did not exit after SIGTERM"
            );
            for pid in running {
                send(pid, libc::SIGTERM);
            }
            // The poll interval of a bounded wait (until `stop_by`) on every run's exit.
            thread::sleep(Duration::from_millis(200));
        }
        faults
    });
    drop(load);

    let beats = beats(&env.dir);
    // No command outlives every pgtenure.
    let ours = |pid: libc::pid_t| {
        alive(pid)
            && std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*env.dir.to_string_lossy()))
    };
    let outlived: Vec<libc::pid_t> = beats
        .iter()
        .map(|b| b.pid)
        .filter(|&pid| ours(pid))
        .collect();
    for &pid in &outlived {
        send(pid, libc::SIGKILL);
    }
    let changes: Vec<(String, i64, i64)> = client()
        .query(
            &format!(
                "SELECT key, token, at_us FROM {} ORDER BY key, token",
                env.log
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get::<_, i64>(2) - offset))
        .collect();
    let runs = runs.lock().unwrap();
    // A command's parent: the run with that pid that was alive at the command's last beat (pids
    // are reused over a long run).
    let parent_of = |b: &Beats| {
        runs.values().find(|run| {
            run.pid == b.ppid
                && run.started <= b.last
                && run
                    .exited
                    .is_none_or(|(exited, _)| b.last <= exited + 1_000_000)
        })
    };
    let mut overlaps = Vec::new();
    let (mut beside_within_bound, mut worst_beside_us) = (0, 0);
    for b in beats.iter().filter(|b| b.ppid != 0) {
        let Some(run) = parent_of(b) else {
            overlaps.push(format!(
                "{}/{}: no pgtenure with pid {}",
                b.key, b.token, b.ppid
            ));
            continue;
        };
        assert_eq!(run.key, b.key);
        // The tenure ends at the key's next token change (none yet: it was the last).
        let Some(&(_, _, ended)) = changes
            .iter()
            .find(|(key, token, _)| *key == b.key && *token > b.token)
        else {
            continue;
        };
        let (exited, status) = run.exited.expect("every run has exited");
        let beside = b.last - ended;
        if exited <= ended {
            if beside > 0 {
                overlaps.push(format!(
                    "{}/{}: the command ran {} ms after the key's next token change, although its \
                     pgtenure had exited ({status:?}) before it",
                    b.key,
                    b.token,
                    beside / 1000
                ));
            }
        } else if beside > 0 {
            let bound = us(run.ttl + run.grace);
            if beside > bound {
                overlaps.push(format!(
                    "{}/{}: the command ran {} ms after the key's next token change, beyond the \
                     loss bound (TTL + grace) of {} ms; pgtenure exited {status:?}",
                    b.key,
                    b.token,
                    beside / 1000,
                    bound / 1000
                ));
            } else {
                beside_within_bound += 1;
                worst_beside_us = worst_beside_us.max(beside);
            }
        }
    }
    let mut exits: BTreeMap<String, u64> = BTreeMap::new();
    for run in runs.values() {
        let (_, status) = run.exited.unwrap();
        let how = match status.code() {
            Some(code) => format!("{code}"),
            None => {
                use std::os::unix::process::ExitStatusExt;
                format!("signal {}", status.signal().unwrap_or(0))
            }
        };
        *exits.entry(how).or_default() += 1;
    }
    let dead = runs.values().filter(|run| run.dead_stderr).count();
    let daemonizing = runs.values().filter(|run| run.daemonizing).count();
    let dead_lost = runs
        .values()
        .filter(|run| {
            // 101: a panic, as eprintln! did on the dead pipe before the fix.
            run.dead_stderr
                && run
                    .exited
                    .is_some_and(|(_, s)| matches!(s.code(), Some(76 | 101)))
        })
        .count();
    println!(
        "checker, lease-run: {} s, {WORKERS} pgtenure processes at a time on {} keys, {} runs, {} \
         tenures whose command ran, {daemonizing} runs whose command daemonized its loop, exits \
         {exits:?}, faults {faults:?}, {dead} runs with a dead stderr ({dead_lost} of them lost \
         the lease), {beside_within_bound} losses whose command \
         ran on beside the next tenure within the loss bound (worst {} ms), {} commands outlived \
         pgtenure, overlaps {}",
        length.as_secs(),
        KEYS.len(),
        runs.len(),
        beats.len(),
        worst_beside_us / 1000,
        outlived.len(),
        overlaps.len()
    );
    assert!(
        outlived.is_empty() && overlaps.is_empty(),
        "commands still ran after every pgtenure exited: {outlived:?}; overlaps:\n{}",
        overlaps.join("\n")
    );
    assert!(!exits.contains_key("101"), "a pgtenure panicked: {exits:?}");
}
