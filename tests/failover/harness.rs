//! The harness itself: the standby follows, a frozen standby falls behind (or, synchronous, holds
//! every commit up), a failover leaves a writable server behind the two-host URL, and neither
//! `stop` nor a killed test process leaves a server or a directory behind.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{accepts, temp_dirs_of, wait_for};
use pgtenure::testing::{ReplicatedPostgres, Replication};
use pgtenure::Db;

use super::{client, init_logs};

const CHILD_ENV: &str = "PGTENURE_TEST_CHILD";

/// The harness: the standby follows, a frozen standby falls behind, a failover loses what it had
/// not received and leaves a writable server behind the two-host URL, and `stop` cleans up.
#[test]
fn the_harness_streams_freezes_and_fails_over() {
    init_logs();
    let started = Instant::now();
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let start_time = started.elapsed();
    let mut primary = client(pg.primary_url());
    primary
        .batch_execute("CREATE TABLE t (v int); INSERT INTO t VALUES (1)")
        .unwrap();
    let mut standby = client(pg.standby_url());
    wait_for(
        "the standby to replay the row",
        Duration::from_secs(10),
        || {
            let n: i64 = standby
                .query_one("SELECT count(*) FROM t", &[])
                .ok()?
                .get(0);
            (n == 1).then_some(())
        },
    );
    assert!(standby.batch_execute("INSERT INTO t VALUES (9)").is_err());
    wait_for("no lag", Duration::from_secs(10), || {
        (pg.replication_lag().unwrap() == 0).then_some(())
    });

    pg.freeze_replication();
    primary.batch_execute("INSERT INTO t VALUES (2)").unwrap();
    assert!(pg.replication_lag().unwrap() > 0, "the standby is behind");
    drop(primary);

    let outage = pg.fail_over().unwrap();
    let mut app = client(pg.url());
    let values: Vec<i32> = app
        .query("SELECT v FROM t ORDER BY v", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        values,
        [1],
        "the row the frozen standby never received is lost"
    );
    app.batch_execute("INSERT INTO t VALUES (3)").unwrap();
    // Db::connect takes both forms of a multi-host connection string, and reaches the server
    // that accepts writes (the second host, now that the first is dead).
    let pairs = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
         target_session_attrs=read-write",
        port_of(pg.primary_url()),
        port_of(pg.standby_url())
    );
    for url in [pg.url(), pairs.as_str()] {
        let db = Db::connect(url).unwrap();
        let mut conn = db.connection().unwrap();
        conn.batch_execute("INSERT INTO t VALUES (4)").unwrap();
    }
    assert!(pg.fail_over().unwrap_err().to_string().contains("already"));
    assert!(client(pg.standby_url())
        .query_one("SELECT NOT pg_is_in_recovery()", &[])
        .unwrap()
        .get::<_, bool>(0));
    println!("harness: start {start_time:?}, failover outage {outage:?}");

    let dirs = [pg.primary_dir().to_owned(), pg.standby_dir().to_owned()];
    assert!(dirs.iter().all(|d| d.join("data").is_dir()), "{dirs:?}");
    pg.stop().unwrap();
    assert!(dirs.iter().all(|d| !d.exists()), "{dirs:?}");
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("a port")
}

/// In synchronous mode a frozen standby holds every commit up (the primary waits for its
/// confirmation, `wait_event` `SyncRep`) until it is thawed.
#[test]
fn a_frozen_synchronous_standby_holds_commits_until_thawed() {
    init_logs();
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let mut primary = client(pg.primary_url());
    primary.batch_execute("CREATE TABLE t (v int)").unwrap();
    pg.freeze_replication();
    let url = pg.url().to_owned();
    let insert = std::thread::spawn(move || {
        client(&url)
            .batch_execute("SET application_name = 'held'; INSERT INTO t VALUES (1)")
            .map_err(|e| e.to_string())
    });
    wait_for(
        "the commit to wait for the standby",
        Duration::from_secs(10),
        || {
            let waiting: i64 = primary
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = 'held' AND wait_event = 'SyncRep'",
                    &[],
                )
                .unwrap()
                .get(0);
            (waiting == 1).then_some(())
        },
    );
    assert!(!insert.is_finished());
    pg.thaw_replication();
    wait_for("the held commit", Duration::from_secs(10), || {
        insert.is_finished().then_some(())
    });
    insert
        .join()
        .unwrap()
        .expect("the commit returns once thawed");
    let rows: i64 = client(pg.standby_url())
        .query_one("SELECT count(*) FROM t", &[])
        .unwrap()
        .get(0);
    assert_eq!(
        rows, 1,
        "a synchronous commit is on the standby when it returns"
    );
    pg.stop().unwrap();
}

#[test]
fn a_killed_process_leaves_neither_server_nor_directory_behind() {
    if std::env::var(CHILD_ENV).is_ok() {
        let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
        println!(
            "PORTS={},{}",
            port_of(pg.primary_url()),
            port_of(pg.standby_url())
        );
        println!("READY");
        // Real time is the subject: the child lives until the parent kills it (60 s at most).
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "harness::a_killed_process_leaves_neither_server_nor_directory_behind",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "kill")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut ports: Vec<u16> = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some((_, list)) = line.split_once("PORTS=") {
            ports = list.split(',').map(|p| p.trim().parse().unwrap()).collect();
        }
        if line.ends_with("READY") {
            break;
        }
    }
    assert_eq!(ports.len(), 2, "the child started both servers");
    assert!(ports.iter().all(|p| accepts(*p)));
    assert_eq!(temp_dirs_of(pid).len(), 2);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for(
        "both orphaned servers to stop and their directories to go",
        Duration::from_secs(30),
        || (ports.iter().all(|p| !accepts(*p)) && temp_dirs_of(pid).is_empty()).then_some(()),
    );
}
