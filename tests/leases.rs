//! Keyed leases against a real PostgreSQL.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::beliefs::Beliefs;
use common::{client, count, db, wait_for, Tables};
use pgtenure::{ErrorKind, KeyRenewal, Leases, LossReason};

fn leases(tables: &mut Tables) -> (Leases, String) {
    let table = tables.name("lease");
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    leases.create_table().unwrap();
    (leases, table)
}

fn other(table: &str) -> Leases {
    Leases::new(&db()).with_table(table).unwrap()
}

/// (owner, token, superseded, live by the database clock)
fn row(table: &str, key: &str) -> Option<(String, i64, bool, bool)> {
    client()
        .query_opt(
            &format!(
                "SELECT owner, token, superseded, held_until > now() FROM {table} WHERE key = $1"
            ),
            &[&key],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn fence_check(leases: &Leases, key: &str, token: i64) -> bool {
    let mut conn = db().pool().get().unwrap();
    let mut tx = conn.transaction().unwrap();
    let ok = leases.fence(&mut tx, key, token).unwrap();
    tx.commit().unwrap();
    ok
}

#[test]
fn sixteen_threads_contend_and_no_two_tenures_overlap_in_the_fenced_ledger() {
    let mut tables = Tables::new();
    let (_, table) = leases(&mut tables);
    let ledger = common::ledger::create(&mut tables);
    let refused = Arc::new(AtomicU64::new(0));
    let raw_grants = Arc::new(AtomicU64::new(0));
    let ttl = Duration::from_millis(300);
    let run_for = Duration::from_secs(4);
    let (t, l, r, g) = (
        table.clone(),
        ledger.clone(),
        refused.clone(),
        raw_grants.clone(),
    );
    common::race(16, move |i| {
        let leases = other(&t).with_owner(&format!("worker-{i}")).unwrap();
        let write = |token: i64| -> bool {
            let mut conn = db().pool().get().unwrap();
            let mut tx = conn.transaction().unwrap();
            if !leases.fence(&mut tx, "hot", token).unwrap() {
                return false;
            }
            tx.execute(
                &format!("INSERT INTO {l} (token, owner) VALUES ($1, $2)"),
                &[&token, &leases.owner()],
            )
            .unwrap();
            tx.commit().unwrap();
            true
        };
        let start = Instant::now();
        let mut seed = i as u64 * 7919 + 1;
        while start.elapsed() < run_for {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 2 == 0 {
                // Managed: renew while writing, release at the end.
                leases
                    .with_lease("hot", ttl, |lease| {
                        for _ in 0..(seed >> 60) + 1 {
                            if !lease.is_held() || !write(lease.token()) {
                                break;
                            }
                            thread::sleep(Duration::from_millis(20));
                        }
                    })
                    .unwrap();
            } else if let Some(grant) = leases.try_acquire("hot", ttl).unwrap() {
                // Raw and never renewed: keeps writing past its TTL, as a paused holder would.
                g.fetch_add(1, Ordering::Relaxed);
                let until = Instant::now() + ttl * 2;
                while Instant::now() < until {
                    if !write(grant.token()) {
                        r.fetch_add(1, Ordering::Relaxed);
                    }
                    thread::sleep(Duration::from_millis(25));
                }
            }
            thread::sleep(Duration::from_millis(seed >> 59));
        }
    });

    // In ledger order tokens never go down and each has one owner: no two tenures overlapped.
    let proof = common::ledger::assert_ordered(&ledger);
    let refused = refused.load(Ordering::Relaxed);
    println!(
        "{} fenced writes, {} tenures, {} raw grants, {refused} stale writes refused",
        proof.writes,
        proof.tenures,
        raw_grants.load(Ordering::Relaxed)
    );
    assert!(
        proof.tenures >= 5,
        "too little contention: {} tenures",
        proof.tenures
    );
    assert!(raw_grants.load(Ordering::Relaxed) > 0);
    assert!(
        refused > 0,
        "raw holders writing past their TTL must have been refused"
    );
}

#[test]
fn tokens_are_kept_on_reacquire_grow_on_takeover_and_stale_holders_are_refused() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let b = other(&table);
    let ttl = Duration::from_millis(200);
    let first = a.try_acquire("k", ttl).unwrap().expect("free key");
    assert_eq!(first.key(), "k");
    assert!(!first.is_superseded());
    let again = a
        .try_acquire("k", Duration::from_secs(60))
        .unwrap()
        .expect("idempotent");
    assert_eq!(
        again.token(),
        first.token(),
        "a re-acquire inside the tenure keeps the token"
    );
    assert!(b.try_acquire("k", ttl).unwrap().is_none(), "held by a");

    // a's second grant extended the lease to 60 s; shorten it so that it lapses now.
    client()
        .execute(
            &format!("UPDATE {table} SET held_until = now() WHERE key = 'k'"),
            &[],
        )
        .unwrap();
    let taken = b
        .try_acquire("k", ttl)
        .unwrap()
        .expect("lapsed: b takes over");
    assert!(taken.token() > first.token());

    // The stale holder a: renew, fence and release all fail and leave b's tenure intact.
    assert_eq!(
        a.renew(&["k"], ttl).unwrap().get("k"),
        Some(KeyRenewal::Lost)
    );
    assert!(!fence_check(&a, "k", first.token()));
    assert!(!a.release("k").unwrap());
    assert!(!a.release_tenure("k", first.token()).unwrap());
    // Not even with b's token, since the owner differs.
    assert!(!fence_check(&a, "k", taken.token()));
    assert_eq!(
        row(&table, "k").unwrap(),
        (b.owner().to_owned(), taken.token(), false, true)
    );
    assert!(fence_check(&b, "k", taken.token()));
    assert!(!fence_check(&b, "k", first.token()), "b with a stale token");

    // The same owner after its own lapse starts a new tenure with a new token.
    let renewed = b.renew(&["k"], Duration::from_millis(1)).unwrap();
    assert_eq!(
        renewed.get("k"),
        Some(KeyRenewal::Held {
            token: taken.token()
        })
    );
    wait_for("b's lease to lapse", Duration::from_secs(5), || {
        row(&table, "k").filter(|r| !r.3).map(|_| ())
    });
    let third = b.try_acquire("k", ttl).unwrap().unwrap();
    assert!(third.token() > taken.token());
    // A stale token of the same owner cannot release the new tenure.
    assert!(!b.release_tenure("k", taken.token()).unwrap());
    assert!(row(&table, "k").unwrap().3);

    // Tokens never repeat, even after the row is deleted.
    client()
        .execute(&format!("DELETE FROM {table}"), &[])
        .unwrap();
    let fourth = a.try_acquire("k", ttl).unwrap().unwrap();
    assert!(fourth.token() > third.token());
}

#[test]
fn a_batch_renewal_reports_each_key_and_a_bad_key_refuses_the_whole_batch() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let b = other(&table);
    let ttl = Duration::from_secs(60);
    let k1 = a.try_acquire("k1", ttl).unwrap().unwrap();
    let k2 = a.try_acquire("k2", ttl).unwrap().unwrap();
    b.try_acquire("k3", ttl).unwrap().unwrap();
    assert!(b.supersede("k2").unwrap());
    assert!(b.supersede("k2").unwrap(), "already flagged: still true");
    assert!(!b.supersede("nobody").unwrap());

    let renewal = a.renew(&["k1", "k2", "k3", "k4", "k1"], ttl).unwrap();
    let outcomes: Vec<_> = renewal.iter().collect();
    assert_eq!(
        outcomes,
        vec![
            ("k1", KeyRenewal::Held { token: k1.token() }),
            ("k2", KeyRenewal::Superseded { token: k2.token() }),
            ("k3", KeyRenewal::Lost),
            ("k4", KeyRenewal::Lost),
        ]
    );
    assert_eq!(renewal.held().collect::<Vec<_>>(), ["k1", "k2"]);
    assert!(renewal.deadline().is_some());
    assert!(a.renew(&[], ttl).unwrap().deadline().is_none());

    let before: Vec<SystemTime> = client()
        .query(&format!("SELECT held_until FROM {table} ORDER BY key"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let err = a.renew(&["k1", "bad\0key"], ttl).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let err = a.renew(&["k1"], Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    let after: Vec<SystemTime> = client()
        .query(&format!("SELECT held_until FROM {table} ORDER BY key"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(before, after, "nothing renewed");

    // A superseded holder releases; the contender then acquires at once.
    assert!(
        b.try_acquire("k2", ttl).unwrap().is_none(),
        "the contender waits for the release"
    );
    assert!(a.release("k2").unwrap());
    assert!(b.try_acquire("k2", ttl).unwrap().is_some());
}

#[test]
fn release_is_owner_guarded_and_sweeps_rows_lapsed_over_an_hour_ago() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let b = other(&table);
    let ttl = Duration::from_secs(60);
    a.try_acquire("mine", ttl).unwrap().unwrap();
    client()
        .batch_execute(&format!(
            "INSERT INTO {table} (key, owner, held_until, token, acquired_at) VALUES
                ('ancient', 'gone', now() - interval '2 hours', 1, now() - interval '3 hours'),
                ('recent', 'gone', now() - interval '10 minutes', 2, now() - interval '1 hour')"
        ))
        .unwrap();
    assert!(!b.release("mine").unwrap(), "not b's");
    assert!(row(&table, "mine").unwrap().3);
    // b's first release swept (per family, at most once a minute).
    assert!(
        row(&table, "ancient").is_none(),
        "swept by the first release"
    );
    assert!(
        row(&table, "recent").is_some(),
        "lapsed less than an hour ago"
    );
    assert!(a.release("mine").unwrap());
    assert!(!a.release("mine").unwrap(), "already released");
    let (_, _, _, live) = row(&table, "mine").unwrap();
    assert!(!live, "released by UPDATE: the row stays, not live");
    assert!(b.try_acquire("mine", ttl).unwrap().is_some());
}

#[test]
fn a_managed_lease_renews_beyond_its_ttl_and_is_exclusive_within_its_family() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let ttl = Duration::from_millis(150);
    let lease = a.acquire("job", ttl).unwrap().expect("free");
    assert_eq!(lease.key(), "job");
    assert_eq!(lease.ttl(), ttl);
    assert!(lease.is_held());
    let clone = a.clone();
    assert!(
        clone.acquire("job", ttl).unwrap().is_none(),
        "same family holds it"
    );
    assert!(
        other(&table).acquire("job", ttl).unwrap().is_none(),
        "another owner"
    );
    let first_deadline = lease.deadline();
    wait_for("several renewals", Duration::from_secs(5), || {
        (Instant::now() > first_deadline + ttl * 2).then_some(())
    });
    assert!(lease.is_held(), "renewed past its first deadline");
    assert!(lease.deadline() > first_deadline);
    assert!(lease.lost().try_recv().is_err(), "no loss");
    let (owner, token, _, live) = row(&table, "job").unwrap();
    assert_eq!(
        (owner.as_str(), token, live),
        (a.owner(), lease.token(), true)
    );
    lease.release().unwrap();
    assert!(!row(&table, "job").unwrap().3, "released");
    let again = clone
        .acquire("job", ttl)
        .unwrap()
        .expect("released: the family may acquire again");
    drop(again);
}

#[test]
fn killing_the_holders_connections_does_not_lose_a_lease_that_can_still_be_renewed() {
    let mut tables = Tables::new();
    let (_, table) = leases(&mut tables);
    let app = tables.name("app");
    let mut config: pgtenure::postgres::Config = common::url().parse().unwrap();
    config.application_name(&app);
    let holder_db = pgtenure::DbBuilder::from_config(config).build().unwrap();
    let a = Leases::new(&holder_db).with_table(&table).unwrap();
    let ttl = Duration::from_millis(600);
    let lease = a.acquire("job", ttl).unwrap().unwrap();
    let mut killer = client();
    let mut killed = 0;
    let start = Instant::now();
    while start.elapsed() < ttl * 4 {
        let n: i64 = killer
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .unwrap()
            .get(0);
        killed += n;
        thread::sleep(Duration::from_millis(60));
    }
    assert!(killed > 0, "no connection was killed");
    assert!(
        lease.is_held(),
        "lost after {killed} killed connections: {:?}",
        lease.loss()
    );
    assert!(lease.lost().try_recv().is_err());
    let (owner, token, _, live) = row(&table, "job").unwrap();
    assert_eq!(
        (owner.as_str(), token, live),
        (a.owner(), lease.token(), true)
    );
    lease.release().unwrap();
}

#[test]
fn deleting_stealing_or_superseding_the_row_fires_the_loss_channel_with_the_reason() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let ttl = Duration::from_millis(300);
    let interval = ttl / 3;

    let deleted = a.acquire("deleted", ttl).unwrap().unwrap();
    client()
        .execute(&format!("DELETE FROM {table} WHERE key = 'deleted'"), &[])
        .unwrap();
    let reason = deleted
        .lost()
        .recv_timeout(interval * 2)
        .expect("loss within a renewal");
    assert_eq!(reason, LossReason::Refused);
    assert!(!deleted.is_held());
    assert_eq!(deleted.loss(), Some(LossReason::Refused));
    deleted.release().unwrap();

    let stolen = a.acquire("stolen", ttl).unwrap().unwrap();
    client()
        .execute(
            &format!(
                "UPDATE {table} SET owner = 'thief', token = token + 1000 WHERE key = 'stolen'"
            ),
            &[],
        )
        .unwrap();
    assert_eq!(
        stolen.lost().recv_timeout(interval * 2),
        Ok(LossReason::Refused)
    );
    stolen.release().unwrap();
    assert_eq!(
        row(&table, "stolen").unwrap().0,
        "thief",
        "release never frees another's tenure"
    );

    let wanted = a.acquire("wanted", ttl).unwrap().unwrap();
    let contender = other(&table);
    assert!(contender.supersede("wanted").unwrap());
    assert_eq!(
        wanted.lost().recv_timeout(interval * 2),
        Ok(LossReason::Superseded)
    );
    assert!(!wanted.is_held());
    assert!(
        contender.try_acquire("wanted", ttl).unwrap().is_none(),
        "still held until released"
    );
    wanted.release().unwrap();
    assert!(
        contender.try_acquire("wanted", ttl).unwrap().is_some(),
        "released at once"
    );
}

#[test]
fn loss_fires_at_the_local_deadline_while_the_renewal_is_stuck_on_a_row_lock() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let ttl = Duration::from_millis(600);
    let lease = a.acquire("job", ttl).unwrap().unwrap();
    let deadline = lease.deadline();
    // Lock the row before the first renewal (at ttl / 3): every renewal now waits on the lock.
    let mut blocker = client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE key = 'job' FOR UPDATE"),
        &[],
    )
    .unwrap();
    assert!(
        Instant::now() < deadline - ttl / 2,
        "the lock came after a renewal"
    );
    let reason = lease
        .lost()
        .recv_timeout(ttl * 3)
        .expect("loss while the renewal is stuck");
    let late = Instant::now().saturating_duration_since(deadline);
    assert_eq!(reason, LossReason::Expired);
    assert!(Instant::now() >= deadline, "not before the deadline");
    assert!(
        late < Duration::from_millis(250),
        "signalled {late:?} after the deadline"
    );
    assert!(!lease.is_held());
    // A lost lease has nothing to release: release returns at once, also when the renewal is still
    // stuck (behind PgBouncer, without cancels), and the watcher joins the thread later.
    let released_at = Instant::now();
    lease.release().unwrap();
    let bound = if db().cancels_on_deadline() {
        Duration::from_millis(900)
    } else {
        Duration::from_millis(1500)
    };
    assert!(
        released_at.elapsed() < bound,
        "release took {:?}",
        released_at.elapsed()
    );
    tx.rollback().unwrap();
    println!("loss signalled {late:?} after the local deadline");
}

#[test]
fn with_lease_runs_once_when_free_never_when_held_and_releases_on_return_and_panic() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let b = other(&table);
    let ttl = Duration::from_millis(300);
    let mut runs = 0;
    let value = a.with_lease("job", ttl, |lease| {
        runs += 1;
        assert!(lease.is_held());
        lease.token()
    });
    let token = value.unwrap().expect("ran");
    assert_eq!(runs, 1);
    assert!(!row(&table, "job").unwrap().3, "released on return");

    let held = b
        .try_acquire("job", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert!(held.token() > token);
    assert_eq!(a.with_lease("job", ttl, |_| runs += 1).unwrap(), None);
    assert_eq!(runs, 1, "not run while held elsewhere");
    assert!(b.release("job").unwrap());

    let a2 = a.clone();
    let panicked = thread::spawn(move || {
        a2.with_lease("job", ttl, |_| panic!("the job failed"))
            .unwrap();
    })
    .join();
    assert!(panicked.is_err(), "the closure panicked");
    assert!(!row(&table, "job").unwrap().3, "released while unwinding");
    assert!(b.try_acquire("job", ttl).unwrap().is_some());
    assert!(b.release("job").unwrap());

    // The closure sees a loss, and its value is still returned.
    let t = table.clone();
    let seen = a
        .with_lease("job", ttl, move |lease| {
            client()
                .execute(&format!("DELETE FROM {t} WHERE key = 'job'"), &[])
                .unwrap();
            lease.lost().recv_timeout(Duration::from_secs(2)).ok()
        })
        .unwrap();
    assert_eq!(seen, Some(Some(LossReason::Refused)));
}

#[test]
fn bad_input_is_refused_before_any_statement_and_stores_nothing() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let long = "k".repeat(1025);
    let keys = ["", "  ", "a\0b", long.as_str()];
    for key in keys {
        assert_eq!(
            a.try_acquire(key, Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            a.acquire(key, Duration::from_secs(1)).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        assert!(a.release(key).unwrap_err().is_invalid_input());
        assert!(a.supersede(key).unwrap_err().is_invalid_input());
        let mut conn = db().pool().get().unwrap();
        let mut tx = conn.transaction().unwrap();
        assert!(a.fence(&mut tx, key, 1).unwrap_err().is_invalid_input());
    }
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_secs(101 * 366 * 86_400),
    ] {
        assert!(
            a.try_acquire("k", ttl).unwrap_err().is_invalid_input(),
            "{ttl:?}"
        );
    }
    let err = a.acquire("k", Duration::from_millis(29)).unwrap_err();
    assert!(err.is_invalid_input());
    assert!(err.to_string().contains("at least 30ms"), "{err}");
    assert!(a
        .with_lease("k", Duration::ZERO, |_| ())
        .unwrap_err()
        .is_invalid_input());
    assert_eq!(count(&mut client(), &table), 0, "nothing stored");
    for bad in ["x; drop table y", "\"a\"", "a.b.c", &"l".repeat(64)] {
        assert!(
            Leases::new(&db())
                .with_table(bad)
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
    }
    assert!(Leases::new(&db())
        .with_owner("")
        .unwrap_err()
        .is_invalid_input());
    // The longest key and SQL-looking keys are stored verbatim.
    let max = "k".repeat(1024);
    assert!(a
        .try_acquire(&max, Duration::from_secs(1))
        .unwrap()
        .is_some());
    let sqlish = "'); DELETE FROM pg_class; --";
    assert!(a
        .try_acquire(sqlish, Duration::from_secs(1))
        .unwrap()
        .is_some());
    assert!(row(&table, sqlish).is_some());
}

#[test]
fn leases_in_a_schema_qualified_table_work() {
    let mut tables = Tables::new();
    let schema = tables.name("schema");
    client()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let a = Leases::new(&db())
        .with_table(&format!("{schema}.locks"))
        .unwrap();
    a.create_table().unwrap();
    let lease = a.acquire("k", Duration::from_millis(300)).unwrap().unwrap();
    assert!(lease.is_held());
    lease.release().unwrap();
    assert!(a
        .try_acquire("k", Duration::from_secs(1))
        .unwrap()
        .is_some());
    client()
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

#[test]
fn a_second_acquire_in_the_family_never_adopts_a_tenure_being_released() {
    let mut tables = Tables::new();
    let (family, table) = leases(&mut tables);
    let outsider = other(&table);
    let beliefs = Arc::new(Beliefs::default());
    let until = Instant::now() + Duration::from_secs(4);
    let ttl = Duration::from_secs(3);
    let hold = |leases: Leases, work: Duration| {
        let beliefs = beliefs.clone();
        thread::spawn(move || {
            let mut tenures = 0;
            while Instant::now() < until {
                let Some(lease) = leases.acquire("k", ttl).unwrap() else {
                    continue;
                };
                let me = beliefs.granted("k", &lease, leases.owner());
                tenures += 1;
                let stop = Instant::now() + work;
                while Instant::now() < stop {
                    beliefs.check("k", me, &lease);
                }
                beliefs.check("k", me, &lease);
                lease.release().unwrap();
            }
            tenures
        })
    };
    // Two threads of one family (acquire and release in a loop, and spin on acquire), and another
    // family trying the key.
    let threads = [
        hold(family.clone(), Duration::ZERO),
        hold(family, Duration::from_millis(2)),
        hold(outsider, Duration::from_millis(1)),
    ];
    let tenures: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    println!("tenures per thread: {tenures:?}");
    assert!(
        tenures.iter().all(|t| *t > 5),
        "too little contention: {tenures:?}"
    );
    assert_eq!(
        beliefs.violations(),
        0,
        "a lease still said is_held() after another lease of its key was granted"
    );
}

#[test]
fn managed_and_raw_tenures_of_one_owner_never_share_or_shorten_each_other() {
    let mut tables = Tables::new();
    let (leases, table) = leases(&mut tables);
    // A live raw grant of this owner is not taken over by a managed acquire.
    let grant = leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert!(leases
        .acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_none());
    assert!(leases.release_tenure("k", grant.token()).unwrap());
    let lease = leases
        .acquire("k", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert!(
        lease.token() > grant.token(),
        "a new tenure draws a new token"
    );
    // A raw acquire in the family never adopts the managed lease's tenure ...
    assert!(leases
        .try_acquire("k", Duration::from_millis(50))
        .unwrap()
        .is_none());
    // ... and a raw renewal of the same owner never shortens it.
    let renewal = leases.renew(&["k"], Duration::from_millis(50)).unwrap();
    assert_eq!(
        renewal.get("k"),
        Some(KeyRenewal::Held {
            token: lease.token()
        })
    );
    let left: f64 = client()
        .query_one(
            &format!("SELECT extract(epoch FROM held_until - now())::float8 FROM {table} WHERE key = 'k'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert!(left > 20.0, "the lease was shortened to {left} s");
    // Another family with the same owner does not take the live lease over either.
    let twin = other(&table).with_owner(leases.owner()).unwrap();
    assert!(twin
        .acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_none());
    assert_eq!(row(&table, "k").unwrap().1, lease.token());
    lease.release().unwrap();
}
