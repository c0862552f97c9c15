//! What every checker shares: CPU load, random numbers, proxied URLs, outcome counts, the fenced
//! ledger write, and the fault injector.

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pgtenure::postgres::error::SqlState;
use pgtenure::Db;

pub use crate::common::load::{Load, Rng};

use crate::common::client;
use crate::common::proxy::Proxy;
pub fn run_for() -> Duration {
    let secs = std::env::var("PGTENURE_CHECKER_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    Duration::from_secs(secs)
}

/// A URL through `proxy` with an application name the fault injector can kill backends by.
/// The statement mode of worker `i`: the workers of one check send their statements in different
/// ways (protocol-level through the transparent proxy, SQL-level, unprepared), so every way is
/// checked under the same faults, side by side.
pub fn mode(i: usize) -> pgtenure::StatementMode {
    use pgtenure::StatementMode::{Protocol, Sql, Unprepared};
    [Protocol, Sql, Unprepared][i % 3]
}

pub fn proxied_url(proxy: &Proxy, app: &str) -> String {
    let config = proxy.config();
    let user = config.get_user().unwrap_or("postgres");
    let db = config.get_dbname().unwrap_or("postgres");
    format!(
        "postgres://{user}@127.0.0.1:{}/{db}?application_name={app}",
        proxy.port()
    )
}

/// The same URL, for a pool whose sessions the server ends after `ms` idle milliseconds.
pub fn idle_ending_url(proxy: &Proxy, app: &str, ms: u32) -> String {
    format!(
        "{}&options=-c%20idle_session_timeout%3D{ms}",
        proxied_url(proxy, app)
    )
}

/// What a worker did.
#[derive(Debug, Default)]
pub struct Counts {
    pub written: AtomicU64,
    pub refused: AtomicU64,
    pub failed: AtomicU64,
    pub acquired: AtomicU64,
    pub losses: AtomicU64,
    pub worst_late_us: AtomicU64,
    /// Application statements (and operations that never hand out a cancel key) cancelled.
    pub stray_cancels: AtomicU64,
}

impl Counts {
    /// Counts a statement that was cancelled although no cancel key was ever handed out for it.
    pub fn stray_cancel(&self, code: Option<&SqlState>, what: &str, e: &dyn std::fmt::Display) {
        if code == Some(&SqlState::QUERY_CANCELED) {
            self.stray_cancels.fetch_add(1, Ordering::SeqCst);
            eprintln!("{what} was cancelled: {e}");
        }
    }

    pub fn line(&self) -> String {
        format!(
            "STATS {} {} {} {} {} {} {}",
            self.written.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.failed.load(Ordering::SeqCst),
            self.acquired.load(Ordering::SeqCst),
            self.losses.load(Ordering::SeqCst),
            self.worst_late_us.load(Ordering::SeqCst),
            self.stray_cancels.load(Ordering::SeqCst)
        )
    }

    pub fn add_line(&self, line: &str) {
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|s| s.parse().ok())
            .collect();
        if let [w, r, f, a, l, late, stray] = v[..] {
            self.stray_cancels.fetch_add(stray, Ordering::SeqCst);
            self.written.fetch_add(w, Ordering::SeqCst);
            self.refused.fetch_add(r, Ordering::SeqCst);
            self.failed.fetch_add(f, Ordering::SeqCst);
            self.acquired.fetch_add(a, Ordering::SeqCst);
            self.losses.fetch_add(l, Ordering::SeqCst);
            self.worst_late_us.fetch_max(late, Ordering::SeqCst);
        }
    }
}

/// One fenced ledger write; counts the outcome. `fence` runs the fence inside the transaction.
pub fn write(
    db: &Db,
    ledger: &str,
    key: &str,
    token: i64,
    owner: &str,
    counts: &Counts,
    fence: impl FnOnce(&mut pgtenure::postgres::Transaction<'_>) -> pgtenure::Result<bool>,
) {
    let cancelled = |e: &pgtenure::postgres::Error| {
        counts.stray_cancel(e.code(), "an application statement", e);
    };
    let outcome = (|| -> Option<bool> {
        let mut conn = db.connection().ok()?;
        let mut tx = conn.transaction().inspect_err(cancelled).ok()?;
        match fence(&mut tx) {
            Ok(true) => {}
            Ok(false) => return Some(false),
            Err(e) => {
                counts.stray_cancel(e.code(), "a fence", &e);
                return None;
            }
        }
        let insert = format!("INSERT INTO {ledger} (key, token, owner) VALUES ($1, $2, $3)");
        tx.execute(&insert, &[&key, &token, &owner])
            .inspect_err(cancelled)
            .ok()?;
        tx.commit().inspect_err(cancelled).ok()?;
        Some(true)
    })();
    let counter = match outcome {
        Some(true) => &counts.written,
        Some(false) => &counts.refused,
        None => &counts.failed,
    };
    counter.fetch_add(1, Ordering::SeqCst);
}

/// Every acknowledged write landed, and no more than those plus the failed ones: a commit whose
/// acknowledgement a fault cut off is counted as failed, yet may have landed. Returns how many did.
pub fn assert_landed(landed: usize, counts: &Counts) -> u64 {
    let (written, failed) = (
        counts.written.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
    );
    let landed = landed as u64;
    assert!(
        written <= landed && landed <= written + failed,
        "the ledger has {landed} rows for {written} acknowledged and {failed} failed writes"
    );
    landed - written
}

/// Random faults until `until`: cuts, blackholes, latency, backend kills, process pauses.
pub fn inject_faults(
    proxy: &Proxy,
    app: &str,
    children: &Mutex<Vec<Child>>,
    until: Instant,
    seed: u64,
) -> BTreeMap<&'static str, u64> {
    let mut rng = Rng::new(seed);
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    let mut admin = client();
    while Instant::now() < until {
        // Real time is the subject: a fault every 200-600 ms.
        thread::sleep(rng.millis(200, 600));
        let kind = match rng.below(8) {
            0 => {
                proxy.cut();
                "cut every connection"
            }
            1 => {
                proxy.blackhole();
                // Real time is the subject: the blackhole lasts 50-900 ms.
                thread::sleep(rng.millis(50, 900));
                proxy.heal();
                "blackhole (50-900 ms)"
            }
            2 => {
                proxy.set_latency(rng.millis(1, 40));
                // Real time is the subject: the latency lasts 100-500 ms.
                thread::sleep(rng.millis(100, 500));
                proxy.set_latency(Duration::ZERO);
                "latency (1-40 ms)"
            }
            3 => {
                let _ = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", &[&app]);
                "kill backends"
            }
            4 => {
                let _ = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'", &[&app]);
                "end idle sessions"
            }
            5 => {
                // The next statement commits and its answer is lost with the connection.
                proxy.fin_after_answer("");
                // Real time is the subject: the armed close waits 50-300 ms for a statement.
                thread::sleep(rng.millis(50, 300));
                "close a connection right after an answer"
            }
            6 => {
                proxy.set_connect_delay(rng.millis(50, 400));
                // Real time is the subject: the connect delay lasts 200-800 ms.
                thread::sleep(rng.millis(200, 800));
                proxy.set_connect_delay(Duration::ZERO);
                "delay new connections (late cancels)"
            }
            _ => {
                let pids: Vec<String> =
                    children.lock().iter().map(|c| c.id().to_string()).collect();
                let Some(pid) = pids.get(rng.below(pids.len().max(1) as u64) as usize) else {
                    continue;
                };
                let _ = Command::new("kill").args(["-STOP", pid]).status();
                // Real time is the subject: the process stays stopped 100-900 ms.
                thread::sleep(rng.millis(100, 900));
                let _ = Command::new("kill").args(["-CONT", pid]).status();
                "pause a worker process (100-900 ms)"
            }
        };
        *faults.entry(kind).or_default() += 1;
    }
    proxy.heal();
    proxy.set_latency(Duration::ZERO);
    proxy.set_connect_delay(Duration::ZERO);
    faults
}
