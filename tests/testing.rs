//! The throwaway-server harness itself: it starts, restarts, stops, and leaves nothing behind.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use common::{accepts, temp_dirs_of, wait_for};
use pgtenure::testing::TempPostgres;
use pgtenure::{tick_claims::TickClaims, Db};

const CHILD_ENV: &str = "PGTENURE_TEST_CHILD";

#[test]
fn a_server_survives_a_restart_and_the_pool_recovers() {
    let pg = TempPostgres::start().unwrap();
    assert!(pg.dir().join("data").is_dir());
    let db = Db::connect(pg.url()).unwrap();
    pgtenure::migrate(&db).unwrap();
    let claims = TickClaims::new(&db);
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let first = claims.claim("job", tick, Duration::from_millis(1)).unwrap();
    assert_eq!(first.map(|c| c.token()), Some(1));

    // Warm the pool: four idle connections, all of which the restart kills.
    let held: Vec<_> = (0..4).map(|_| db.connection().unwrap()).collect();
    drop(held);
    assert!(db.pool_state().idle_connections >= 4);

    pg.restart().unwrap();
    // Regression: the dead pooled connections are skipped at once, so the first claim succeeds.
    let won = claims
        .claim(
            "job",
            tick + Duration::from_secs(60),
            Duration::from_secs(1),
        )
        .unwrap();
    assert_eq!(
        won.map(|c| c.token()),
        Some(2),
        "the row survived the restart"
    );
}

#[test]
fn stop_removes_the_server_and_its_directory() {
    let pg = TempPostgres::start().unwrap();
    let (dir, port) = (pg.dir().to_owned(), pg.port());
    assert!(accepts(port));
    pg.stop().unwrap();
    assert!(!dir.exists());
    assert!(!accepts(port));
}

/// Something still writing in the server's directory while it is deleted (as a server process
/// that outlived its postmaster would) makes one `rm -rf` fail with "Directory not empty": the
/// deletion is tried again until the writer stops, and nothing is left behind.
#[test]
fn stop_deletes_the_directory_though_something_still_writes_in_it() {
    let pg = TempPostgres::start().unwrap();
    let (dir, port) = (pg.dir().to_owned(), pg.port());
    let writing = Duration::from_secs(3);
    let writer = {
        let dir = dir.clone();
        std::thread::spawn(move || {
            let until = std::time::Instant::now() + writing;
            let mut created = 0u64;
            while std::time::Instant::now() < until {
                // Fails once the directory is gone; it is not made again.
                if std::fs::write(dir.join(format!("late-{created}")), b"x").is_ok() {
                    created += 1;
                }
            }
            created
        })
    };
    pg.stop().unwrap();
    let created = writer.join().unwrap();
    assert!(created > 0, "the writer never wrote");
    assert!(!dir.exists(), "{} is left behind", dir.display());
    assert!(!accepts(port));
}
/// In the child, start a server and report it, then `mode` decides how the process ends.
fn child(mode: &str) {
    let pg = TempPostgres::start().unwrap();
    println!("PORT={}", pg.port());
    if mode == "static" {
        // A shared server in a static is never dropped: the process just exits.
        let url = pgtenure::testing::database_url().unwrap();
        println!(
            "SHARED={}",
            url.rsplit(':').next().unwrap().split('/').next().unwrap()
        );
        std::mem::forget(pg);
        std::process::exit(0);
    }
    println!("READY");
    // Real time is the subject: the child lives until the parent kills it (60 s at most).
    std::thread::sleep(Duration::from_secs(60));
}

fn run_child(test: &str, mode: &str) -> (u32, Vec<u16>) {
    run_child_in(test, mode, &std::env::temp_dir())
}

/// [`run_child`] with `tmpdir` as the child's `TMPDIR`.
fn run_child_in(test: &str, mode: &str, tmpdir: &std::path::Path) -> (u32, Vec<u16>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .env("TMPDIR", tmpdir)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut ports = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest prints "test name ... " before the child's first line, without a newline.
        for marker in ["PORT=", "SHARED="] {
            if let Some((_, port)) = line.split_once(marker) {
                ports.push(port.trim().parse().unwrap());
            }
        }
        if line.ends_with("READY") {
            child.kill().unwrap();
            break;
        }
    }
    child.wait().unwrap();
    (pid, ports)
}

#[test]
fn a_killed_process_leaves_no_server_or_directory_behind() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        return child(&mode);
    }
    let (pid, ports) = run_child(
        "a_killed_process_leaves_no_server_or_directory_behind",
        "kill",
    );
    assert_eq!(ports.len(), 1);
    wait_for(
        "the orphaned server to stop",
        Duration::from_secs(30),
        || (!accepts(ports[0]) && temp_dirs_of(pid).is_empty()).then_some(()),
    );
}

/// Run as root with a private `TMPDIR` (mode 0755, owned by root, as CI runners and containers
/// make it), the servers run as an unprivileged user who cannot delete entries there: a server
/// dropped, one forgotten and a shared one in a static still leave the directory empty once the
/// process has exited. Not root: nothing to check (the servers run as this user).
#[test]
fn a_private_tmpdir_as_root_is_left_empty() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        if mode == "private" {
            // Dropped: stopped and deleted while the process runs, at once: the supervisor, who
            // may not delete the directory here, does not try for 10 s before the reaper does.
            let pg = TempPostgres::start().unwrap();
            let started = std::time::Instant::now();
            pg.stop().unwrap();
            let took = started.elapsed();
            assert!(took < Duration::from_secs(5), "stop() took {took:?}");
            return child("static");
        }
        return child(&mode);
    }
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        eprintln!("not root: the servers run as this user, who owns TMPDIR's entries");
        return;
    }
    let private = std::env::temp_dir().join(format!("t_private_tmp_{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&private)
        .unwrap();
    let (_, ports) = run_child_in(
        "a_private_tmpdir_as_root_is_left_empty",
        "private",
        &private,
    );
    if ports.len() != 2 {
        // The child failed before its last server (see its stderr): nothing of it is checked.
        let _ = std::fs::remove_dir_all(&private);
        panic!("the child reported {ports:?}, not two servers");
    }
    let left = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let stopped = || ports.iter().all(|p| !accepts(*p)) && left(&private).is_empty();
    while !stopped() && std::time::Instant::now() < deadline {
        // A bounded poll (30 s) of the ports and the directory: the processes that clean up
        // outlive the test's child, and no library state reports them.
        std::thread::sleep(Duration::from_millis(50));
    }
    let (waited, leftovers) = (stopped(), left(&private));
    let _ = std::fs::remove_dir_all(&private);
    assert!(
        waited,
        "left in the private TMPDIR 30 s after the process exited: {leftovers:?}"
    );
}

#[test]
fn a_server_in_a_static_stops_when_the_process_exits() {
    if let Ok(mode) = std::env::var(CHILD_ENV) {
        return child(&mode);
    }
    let (pid, ports) = run_child(
        "a_server_in_a_static_stops_when_the_process_exits",
        "static",
    );
    assert_eq!(ports.len(), 2, "{ports:?}");
    wait_for("both servers to stop", Duration::from_secs(30), || {
        (ports.iter().all(|p| !accepts(*p)) && temp_dirs_of(pid).is_empty()).then_some(())
    });
}

/// As root with a `TMPDIR` the server's user cannot enter (mode 0700, owned by root): the error
/// says which directory and what to do (it said only "could not run initdb: Permission denied"),
/// and nothing is left in it.
#[test]
fn a_tmpdir_the_server_user_cannot_enter_is_named_in_the_error() {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if std::env::var(CHILD_ENV).as_deref() == Ok("closed") {
        let err = TempPostgres::start().map(|_| ()).unwrap_err();
        println!("KIND={:?}", err.kind());
        println!("ERR={err}");
        return;
    }
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        eprintln!("not root: the servers run as this user, who can enter TMPDIR");
        return;
    }
    let closed = std::env::temp_dir().join(format!("t_closed_tmp_{}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&closed)
        .unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_tmpdir_the_server_user_cannot_enter_is_named_in_the_error",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "closed")
        .env("TMPDIR", &closed)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let left: Vec<_> = std::fs::read_dir(&closed)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let _ = std::fs::remove_dir_all(&closed);
    assert!(stdout.contains("KIND=Setup"), "{stdout}");
    assert!(
        stdout.contains(&format!("cannot enter {}", closed.display()))
            && stdout.contains("set TMPDIR"),
        "{stdout}"
    );
    assert!(left.is_empty(), "{left:?}");
}
