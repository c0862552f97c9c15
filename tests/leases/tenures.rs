//! Tenures and tokens: exclusive holders, tokens that only grow, batch renewals, guarded releases, bad input.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::common::{client, count, db, wait_for, Tables};
use pgtenure::{
    leases::{KeyRenewal, Leases, Refusal},
    ErrorKind,
};

use super::{fence_check, leases, other, row};

#[test]
fn sixteen_threads_contend_and_no_two_tenures_overlap_in_the_fenced_ledger() {
    let mut tables = Tables::new();
    let (_, table) = leases(&mut tables);
    let ledger = crate::common::ledger::create(&mut tables);
    let refused = Arc::new(AtomicU64::new(0));
    let raw_grants = Arc::new(AtomicU64::new(0));
    let ttl = Duration::from_millis(300);
    let run_for = Duration::from_secs(4);
    // A pool of its own: sixteen threads holding fenced transactions while their acquires wait
    // for the row's lock can take every connection of a shared pool, and the other tests' leases
    // (TTLs of 150 ms) then wait for one past their deadlines.
    let stress = pgtenure::Db::builder(&crate::common::url())
        .and_then(|b| b.max_size(40))
        .and_then(|b| b.build())
        .unwrap()
        .with_cancel_on_deadline(!crate::common::through_pgbouncer());
    let (t, l, r, g) = (
        table.clone(),
        ledger.clone(),
        refused.clone(),
        raw_grants.clone(),
    );
    crate::common::race(16, move |i| {
        let leases = pgtenure::leases::Leases::new(&stress)
            .with_table(&t)
            .unwrap()
            .with_owner(&format!("worker-{i}"))
            .unwrap();
        let write = |token: i64| -> bool {
            let mut conn = stress.connection().unwrap();
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
                            // Real time is the subject: a holder's write every 20 ms.
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
                    // Real time is the subject: a write every 25 ms, on past the TTL.
                    thread::sleep(Duration::from_millis(25));
                }
            }
            // Real time is the subject: a random pause (0-31 ms) between tenures.
            thread::sleep(Duration::from_millis(seed >> 59));
        }
    });

    // In ledger order tokens never go down and each has one owner: no two tenures overlapped.
    let proof = crate::common::ledger::assert_ordered(&ledger);
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
    // Lapses are made by hand below; a grant must stay live across the few statements that check
    // it (200 ms did not on a loaded machine).
    let ttl = Duration::from_secs(5);
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
        let mut conn = db().connection().unwrap();
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

/// A promotion as a grant finds it (the record names another timeline than the server's; the
/// promotion itself is `tests/failover/`'s): the grant is answered `stale`, reads the record
/// again, records the promotion, and grants of lapsed and absent keys wait one longest TTL; the
/// live tenures' renewals and a raw holder's re-acquire do not.
#[test]
fn a_hold_off_after_a_promotion_refuses_new_grants_but_not_live_tenures() {
    let mut tables = Tables::new();
    let (leases, table) = leases(&mut tables);
    let b = other(&table).with_owner("b").unwrap();
    let ttl = Duration::from_secs(3);
    let live = leases.acquire("live", ttl).unwrap().unwrap();
    let raw = leases.try_acquire("raw", ttl).unwrap().unwrap();
    assert!(leases
        .try_acquire("lapsed", Duration::from_millis(200))
        .unwrap()
        .is_some());
    let record = |column: &str| -> i64 {
        client()
            .query_one(&format!("SELECT {column} FROM {table}_promotion"), &[])
            .unwrap()
            .get(0)
    };
    assert_eq!(
        record("longest_ttl"),
        3_000_000,
        "the longest TTL asked for, in microseconds"
    );
    // An acquire refused because the key is held, with a TTL the record knows, writes nothing.
    let before = record("xmin::text::bigint");
    assert!(b.try_acquire("raw", ttl).unwrap().is_none());
    assert_eq!(record("xmin::text::bigint"), before);
    wait_for("the short grant to lapse", Duration::from_secs(5), || {
        (!row(&table, "lapsed").unwrap().3).then_some(())
    });
    let timeline = record("timeline");
    client()
        .batch_execute(&format!(
            "UPDATE {table}_promotion SET timeline = timeline + 1000"
        ))
        .unwrap();
    let held_off = Instant::now();
    // A process that starts now: it reads the record, finds another timeline than the server's,
    // and records the promotion.
    let after = crate::common::fresh_db();
    let b = Leases::new(&after)
        .with_table(&table)
        .unwrap()
        .with_owner("b")
        .unwrap();

    for key in ["lapsed", "absent"] {
        assert!(
            b.try_acquire(key, Duration::from_secs(1))
                .unwrap()
                .is_none(),
            "{key}"
        );
    }
    assert_eq!(record("timeline"), timeline, "the promotion recorded");
    assert_eq!(
        row(&table, "lapsed").map(|r| r.0).as_deref(),
        Some(leases.owner())
    );
    assert_eq!(row(&table, "absent"), None, "nothing is stored");
    for (key, has_row) in [("lapsed", true), ("absent", false)] {
        match b.refusal(key).unwrap() {
            Refusal::HeldOff { row, until } => {
                assert_eq!(row.is_some(), has_row, "{key}");
                let left = until.duration_since(SystemTime::now()).unwrap_or_default();
                assert!(
                    left > Duration::from_secs(1) && left < Duration::from_secs(4),
                    "{left:?}"
                );
            }
            other => panic!("{key}: {other:?}"),
        }
    }
    // A Db that opts out grants at once.
    let eager = Leases::new(&db().with_promotion_hold_off(false))
        .with_table(&table)
        .unwrap()
        .with_owner("eager")
        .unwrap();
    let eager_grant = eager.try_acquire("eager", Duration::from_secs(1)).unwrap();
    assert!(eager_grant.is_some(), "no hold-off when opted out");
    assert!(matches!(
        eager.refusal("absent").unwrap(),
        Refusal::Vacant(None)
    ));
    let again = leases.try_acquire("raw", ttl).unwrap().unwrap();
    assert_eq!(
        again.token(),
        raw.token(),
        "a raw holder's re-acquire of its live grant"
    );
    let renewed = leases.renew(&["raw"], ttl).unwrap();
    assert_eq!(renewed.held().collect::<Vec<_>>(), ["raw"]);
    assert!(live.is_held());

    let grant = wait_for("the hold-off to end", Duration::from_secs(10), || {
        b.try_acquire("lapsed", Duration::from_secs(1)).unwrap()
    });
    assert!(
        held_off.elapsed() >= Duration::from_millis(2500),
        "granted {} ms into a 3 s hold-off",
        held_off.elapsed().as_millis()
    );
    assert!(grant.token() > raw.token());
    assert!(b
        .try_acquire("absent", Duration::from_secs(1))
        .unwrap()
        .is_some());
    drop(live);
}

/// A lease table made before the promotion record existed (an earlier version): grants fail with
/// the server's reason and the advice to call `create_table`, which makes the record beside the
/// existing table, as of the server's timeline now; then grants work.
#[test]
fn create_table_adds_the_promotion_record_to_a_table_made_without_it() {
    let mut tables = Tables::new();
    let (leases, table) = leases(&mut tables);
    client()
        .batch_execute(&format!("DROP TABLE {table}_promotion"))
        .unwrap();
    let err = leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"), "{err}");
    assert!(err.to_string().contains("create_table()"), "{err}");
    assert_eq!(row(&table, "k"), None, "nothing is stored");

    leases.create_table().unwrap();
    let (now_timeline, nothing_held_off): (bool, bool) = {
        let r = client()
            .query_one(
                &format!(
                    "SELECT timeline = ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))
                                       ::bit(32)::bigint,
                            grants_from IS NULL AND seen_at IS NULL
                       FROM {table}_promotion"
                ),
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    assert!(
        now_timeline && nothing_held_off,
        "the record starts as of now"
    );
    assert!(leases
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_some());
}
