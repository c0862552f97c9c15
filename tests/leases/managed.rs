//! Managed leases: their renewal thread, loss and its reasons, `with_lease`, and one family's keys.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::beliefs::Beliefs;
use crate::common::{client, db, wait_for, Tables};
use pgtenure::leases::{KeyRenewal, LeaseLoss, Leases, Refusal};

use super::{fence_check, leases, other, row};

#[test]
fn a_managed_lease_renews_beyond_its_ttl_and_is_exclusive_within_its_family() {
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    // Renewals every 500 ms with a second to spare: a shorter TTL was lost, one run in three, to a
    // renewal that a server flushing its WAL to disk held up while this binary's other tests wrote
    // (the DATABASE_URL pass), and 600 ms to a renewal thread a loaded machine ran 400 ms late.
    let ttl = Duration::from_millis(1500);
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
    wait_for("several renewals", ttl * 5, || {
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
    // Backends are found by application name. Behind a transaction pooler that name is whichever
    // client last ran on a shared server connection, so killing by it would hit other tests'
    // sessions: the holder connects directly there.
    let url = if crate::common::through_pgbouncer() {
        crate::common::direct_url()
    } else {
        crate::common::url()
    };
    let holder_db =
        pgtenure::Db::connect(&crate::common::with_param(&url, "application_name", &app)).unwrap();
    let a = Leases::new(&holder_db).with_table(&table).unwrap();
    let ttl = Duration::from_millis(1500);
    let lease = a.acquire("job", ttl).unwrap().unwrap();
    let mut killer = client();
    let mut killed = 0;
    let start = Instant::now();
    // Every connection the holder has is killed every 150 ms for two TTLs, so renewals must get
    // through between kills (every 500 ms, retried every 125 ms; the lease is lost after 1 s of
    // failures). Killing every 60 ms with a 600 ms TTL left no such window on a loaded machine,
    // nor, once in a few runs, did 150 ms with 900 ms against a server flushing WAL to disk: the
    // lease expired, as it should when it cannot be renewed.
    while start.elapsed() < ttl * 2 {
        let n: i64 = killer
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .unwrap()
            .get(0);
        killed += n;
        // Real time is the subject: a kill every 150 ms for two TTLs.
        thread::sleep(Duration::from_millis(150));
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
        .recv_timeout(interval * 6)
        .expect("loss within a renewal");
    assert_eq!(reason, LeaseLoss::Refused);
    assert!(!deleted.is_held());
    assert_eq!(deleted.loss(), Some(LeaseLoss::Refused));
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
        stolen.lost().recv_timeout(interval * 6),
        Ok(LeaseLoss::Refused)
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
        wanted.lost().recv_timeout(interval * 6),
        Ok(LeaseLoss::Superseded)
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
    assert_eq!(reason, LeaseLoss::Expired);
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
    assert_eq!(seen, Some(Some(LeaseLoss::Refused)));
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
    // ... nor does a raw renewal of the same owner (it is not the batch's tenure), which never
    // shortens it either ...
    let renewal = leases.renew(&["k"], Duration::from_millis(50)).unwrap();
    assert_eq!(renewal.get("k"), Some(KeyRenewal::Lost));
    // ... nor a raw release by key: the lease releases its own tenure.
    assert!(!leases.release("k").unwrap());
    assert!(lease.is_held());
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

/// Two `Leases` families (or two processes) sharing an owner name: the second is another candidate
/// and never adopts the first's managed tenure. Its raw acquire is refused (saying this owner holds
/// the key outside its family), its raw renewal reports the key lost and its raw release by key
/// frees nothing, so it never has a token that fences; the managed lease's fence passes throughout,
/// and once the lease is released the second family wins a new tenure with a larger token.
/// (Reproduced before the fix: the raw acquire re-acquired the managed tenure with its token and
/// both families' fences passed.)
#[test]
fn another_family_with_the_same_owner_never_adopts_a_managed_tenure() {
    let mut tables = Tables::new();
    let (first, table) = leases(&mut tables);
    let first = first.with_owner("shared-name").unwrap();
    let second = other(&table).with_owner("shared-name").unwrap();
    // Renewed every second: the test sees a renewal of the marked tenure.
    let lease = first.acquire("k", Duration::from_secs(3)).unwrap().unwrap();
    let token = lease.token();

    let drawn = || -> i64 {
        client()
            .query_one(&format!("SELECT last_value FROM {table}_token_seq"), &[])
            .unwrap()
            .get(0)
    };
    let before = drawn();
    let grant = second.try_acquire("k", Duration::from_secs(30)).unwrap();
    assert_eq!(drawn(), before, "a refused acquire draws no token");
    assert!(
        grant.is_none(),
        "the second family adopted the managed tenure: {grant:?} (the lease's token is {token})"
    );
    match second.refusal("k").unwrap() {
        Refusal::SameOwner(row) => {
            assert_eq!((row.token, row.live), (token, true));
            assert!(row.managed, "{row:?}");
        }
        other => panic!("refused as {other:?}, not as this owner's tenure elsewhere"),
    }
    assert_eq!(
        second
            .renew(&["k"], Duration::from_secs(30))
            .unwrap()
            .get("k"),
        Some(KeyRenewal::Lost)
    );
    assert!(!second.release("k").unwrap(), "a raw release freed it");
    // A managed acquire of the second family is refused as well (a live row is never taken).
    assert!(second
        .acquire("k", Duration::from_secs(30))
        .unwrap()
        .is_none());
    // The lease is intact: held, renewing, the row its own, its fence the only one that passes.
    assert!(lease.is_held());
    assert_eq!(
        row(&table, "k").unwrap(),
        ("shared-name".to_owned(), token, false, true)
    );
    assert!(fence_check(&first, "k", token));
    // The second family holds no token: none it could have been handed fences (the one below the
    // lease's is the only other candidate a sequence could have given it).
    assert!(!fence_check(&second, "k", token - 1));
    let renewed_before = lease.deadline();
    wait_for("a renewal of the lease", Duration::from_secs(20), || {
        (lease.deadline() > renewed_before).then_some(())
    });
    assert!(lease.is_held());

    // Released: the second family wins a new tenure, with a larger token, and the old one fences
    // no more.
    lease.release().unwrap();
    let grant = second
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert!(grant.token() > token, "{} after {token}", grant.token());
    assert!(fence_check(&second, "k", grant.token()));
    assert!(!fence_check(&first, "k", token));
    // A raw grant is the owner's, as before: the first family, same owner, re-acquires it
    // idempotently (same token) and renews it.
    let again = first
        .try_acquire("k", Duration::from_secs(30))
        .unwrap()
        .unwrap();
    assert_eq!(again.token(), grant.token());
    assert_eq!(
        first
            .renew(&["k"], Duration::from_secs(30))
            .unwrap()
            .get("k"),
        Some(KeyRenewal::Held {
            token: grant.token()
        })
    );
    assert!(second.release("k").unwrap());
}

/// An application that takes every connection `Db::connection` will lend it still leaves one for
/// the renewals: its lease is renewed for many TTLs, and the connection it asks for beyond the limit
/// is refused within the pool's timeout, saying why.
#[test]
fn an_application_holding_every_connection_it_can_get_does_not_starve_renewals() {
    let mut tables = Tables::new();
    let (_, table) = leases(&mut tables);
    let db = pgtenure::Db::builder(&crate::common::url())
        .and_then(|b| b.max_size(3))
        .and_then(|b| b.connection_timeout(Duration::from_millis(400)))
        .and_then(|b| b.build())
        .unwrap()
        .with_cancel_on_deadline(!crate::common::through_pgbouncer());
    let a = Leases::new(&db).with_table(&table).unwrap();
    // Long enough for a renewal to commit on a server that flushes its WAL to disk while the other
    // tests of this binary write: with 300 ms, one run in six lost the lease to a slow commit
    // against such a server, the application holding nothing it should not.
    let ttl = Duration::from_secs(1);
    let lease = a.acquire("job", ttl).unwrap().unwrap();
    let held: Vec<_> = (0..2).map(|_| db.connection().unwrap()).collect();
    let err = db.connection().unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(
        err.to_string()
            .contains("all 2 connections the pool lends are in use"),
        "{err}"
    );
    // Many TTLs, the application holding all it can: never lost.
    let lost = lease.lost().recv_timeout(ttl * 5);
    assert!(
        lost.is_err(),
        "lost while the application held 2 of 3: {lost:?}"
    );
    assert!(row(&table, "job").unwrap().3, "the row is live");
    drop(held);
    lease.release().unwrap();
}

/// A release that waits for its row past its bound (a transaction holds the row) is cancelled by
/// pgtenure itself: the error is a `Timeout` that says pgtenure cancelled it and why, not that the
/// server's `statement_timeout` ran out.
#[test]
fn a_release_pgtenure_cancelled_says_so_and_is_a_timeout() {
    if crate::common::through_pgbouncer() {
        // No cancels behind a pooler: the release just overruns its bound.
        return;
    }
    let mut tables = Tables::new();
    let (a, table) = leases(&mut tables);
    let lease = a.acquire("held", Duration::from_secs(30)).unwrap().unwrap();
    let mut operator = client();
    let mut tx = operator.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE key = 'held' FOR UPDATE"),
        &[],
    )
    .unwrap();
    let err = lease.release().unwrap_err();
    tx.rollback().unwrap();
    assert_eq!(err.kind(), pgtenure::ErrorKind::Timeout, "{err}");
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("release lease failed: canceling statement due to user request (57014); pgtenure cancelled it after 4.5 s, the release's bound"),
        "{text}"
    );
    assert!(!text.contains("statement_timeout"), "{text}");
}
