//! Failover to a streaming standby, one file per concern: the harness itself (`harness`), then
//! what leases, leadership and fenced writes keep across a promotion, with a synchronous standby
//! (`synchronous`) and with a lagging asynchronous one (`asynchronous`). Every test starts
//! replicated servers of its own (never `DATABASE_URL`'s: it kills a server) and prints its trials
//! (`--nocapture` shows them).

#[path = "../common/mod.rs"]
mod common;

mod asynchronous;
mod harness;
mod outages;
mod synchronous;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pgtenure::postgres::{self, NoTls};
use pgtenure::testing::ReplicatedPostgres;
use pgtenure::{
    elector::{Elector, LeaderEvent},
    leases::Leases,
    Db,
};

/// The key the holder leases, and the ledger key of the leader's writes.
const KEY: &str = "job";

const LEADER_KEY: &str = "leader";

/// The fleet the holder leads (the elector's default name).
const FLEET: &str = pgtenure::elector::DEFAULT_NAME;

/// A key and a fleet the holder wins while the standby is frozen, in tables of their own made
/// before: the standby never sees them, nor any TTL asked of those tables.
const UNSEEN: &str = "unseen";

const UNSEEN_LEASES: &str = "unseen_leases";

const UNSEEN_LEADER: &str = "unseen_leader";

/// How often the holder writes, and the contender polls.
const WRITE_EVERY: Duration = Duration::from_millis(20);

const POLL_EVERY: Duration = Duration::from_millis(100);

fn init_logs() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn client(url: &str) -> postgres::Client {
    postgres::Client::connect(url, NoTls).expect("a direct connection")
}

/// The application's pool: both servers, read-write only, a short checkout timeout so the threads
/// see the outage instead of waiting it out in the pool.
fn pool(pg: &ReplicatedPostgres) -> Db {
    Db::builder(pg.url())
        .and_then(|b| b.max_size(8))
        .and_then(|b| b.connection_timeout(Duration::from_secs(3)))
        .and_then(|b| b.build())
        .expect("the two-host URL connects")
}

/// The lease and leader tables, and the ledger fenced writes go to.
fn create_tables(db: &Db, url: &str) {
    Leases::new(db).create_table().unwrap();
    Elector::new(db).create_table().unwrap();
    client(url)
        .batch_execute(
            "CREATE TABLE ledger (id bigserial PRIMARY KEY, key text NOT NULL,
                                  token bigint NOT NULL, owner text NOT NULL,
                                  write bigint NOT NULL)",
        )
        .unwrap();
}

/// A ledger row: `(id, key, token, owner, write)`.
type Row = (i64, String, i64, String, i64);

/// Every ledger row, in ledger order.
fn ledger(url: &str) -> Vec<Row> {
    client(url)
        .query(
            "SELECT id, key, token, owner, write FROM ledger ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

/// The writes (transactions) a ledger holds. Not its row ids: after an asynchronous promotion the
/// ledger's `bigserial` hands out the ids of lost rows again, as the token sequences do.
fn writes(rows: &[Row]) -> BTreeSet<i64> {
    rows.iter().map(|r| r.4).collect()
}

/// Asserts that, per key, the ledger's tokens never go down and each token has one owner: no two
/// tenures' fenced writes landed out of order.
fn assert_ledger_ordered(rows: &[Row]) {
    let mut last: std::collections::BTreeMap<&str, (i64, &str)> = Default::default();
    for (id, key, token, owner, _) in rows {
        if let Some((t, o)) = last.get(key.as_str()) {
            assert!(
                token > t || (token == t && o == owner),
                "ledger row {id}: {key} token {token} of {owner} after token {t} of {o}"
            );
        }
        last.insert(key, (*token, owner));
    }
}

/// What a fenced write came to.
enum Write {
    /// Committed: the commit returned Ok, with the write's number (its rows' `write`).
    Acked(i64),
    /// A fence said no: nothing written.
    Refused,
    /// An error (the outage): not acknowledged.
    Failed,
}

/// One transaction: the fences of the lease tenure `token` of `KEY` and, when given, of the
/// leadership `term`, then one ledger row per tenure.
fn fenced_write(
    db: &Db,
    leases: &Leases,
    token: i64,
    leader: Option<(&Elector, i64)>,
    owner: &str,
) -> Write {
    static WRITES: AtomicI64 = AtomicI64::new(1);
    let write = WRITES.fetch_add(1, Ordering::SeqCst);
    let attempt = || -> Result<bool, Box<dyn std::error::Error>> {
        let mut conn = db.connection()?;
        let mut tx = conn.transaction()?;
        let insert = "INSERT INTO ledger (key, token, owner, write) VALUES ($1, $2, $3, $4)";
        if !leases.fence(&mut tx, KEY, token)? {
            return Ok(false);
        }
        tx.execute(insert, &[&KEY, &token, &owner, &write])?;
        if let Some((elector, term)) = leader {
            if !elector.fence(&mut tx, term)? {
                return Ok(false);
            }
            tx.execute(insert, &[&LEADER_KEY, &term, &owner, &write])?;
        }
        tx.commit()?;
        Ok(true)
    };
    match attempt() {
        Ok(true) => Write::Acked(write),
        Ok(false) => Write::Refused,
        Err(_) => Write::Failed,
    }
}

/// A thread that runs `step` every `every` until stopped; `stop` joins it.
struct Looping {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Looping {
    fn start(every: Duration, mut step: impl FnMut() + Send + 'static) -> Looping {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                step();
                // Real time is the subject: a step every `every`, as a caller's loop paces it.
                std::thread::sleep(every);
            }
        });
        Looping {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("a test thread");
        }
    }
}

impl Drop for Looping {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One trial's figures, a row of the printed table.
#[derive(Debug, Default, Clone)]
struct Trial {
    outage: Duration,
    /// `None` where the trial gives them up on purpose (the asynchronous one).
    lease_survived: Option<bool>,
    leadership_survived: Option<bool>,
    /// From the promotion to a successor's grant of the key (the asynchronous trial).
    successor_wait: Option<Duration>,
    /// The longest time between two acknowledged fenced writes of the holder (the synchronous
    /// trial): what the application saw of the outage.
    write_gap: Option<Duration>,
    acked: usize,
    lost_acked: usize,
    contender_grants: usize,
    token_before: i64,
    token_after: i64,
    term_before: i64,
    term_after: i64,
}

fn shown(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

fn print_table(title: &str, trials: &[Trial]) {
    let mut out = format!(
        "\n{title}\n trial | outage ms | write gap ms | lease kept | leadership kept | acked writes | lost acked \
         | contender grants | token before -> after | term before -> after | successor after ms\n"
    );
    for (i, t) in trials.iter().enumerate() {
        out.push_str(&format!(
            " {:>5} | {:>9} | {:>12} | {:>10} | {:>15} | {:>12} | {:>10} | {:>16} | {:>8} -> {:<8} | {:>6} -> {:<9} | {}\n",
            i + 1,
            t.outage.as_millis(),
            t.write_gap
                .map_or("-".to_owned(), |d| d.as_millis().to_string()),
            shown(t.lease_survived),
            shown(t.leadership_survived),
            t.acked,
            t.lost_acked,
            t.contender_grants,
            t.token_before,
            t.token_after,
            t.term_before,
            t.term_after,
            t.successor_wait
                .map_or("-".to_owned(), |d| d.as_millis().to_string()),
        ));
    }
    println!("{out}");
}

/// The term of `leadership`'s first event, which must be its election (within 10 s).
fn elected(leadership: &pgtenure::elector::Leadership) -> i64 {
    match leadership
        .events()
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
    {
        LeaderEvent::Elected { term } => term,
        other => panic!("expected to be elected, got {other:?}"),
    }
}
