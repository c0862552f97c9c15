//! A synchronous standby promoted: every acknowledged write, the lease and the leadership survive,
//! and the holder's own renewal starts the hold-off that follows the promotion.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::wait_for;
use pgtenure::testing::{ReplicatedPostgres, Replication};
use pgtenure::{elector::Elector, leases::Leases};

use super::{
    assert_ledger_ordered, client, create_tables, elected, fenced_write, init_logs, ledger, pool,
    print_table, writes, Looping, Trial, Write, KEY, POLL_EVERY, UNSEEN, WRITE_EVERY,
};

/// One synchronous trial: a holder with a managed lease and the leadership writes fenced rows every
/// 20 ms through the two-host URL, a contender polls every 100 ms; the primary is killed and the
/// standby promoted.
fn synchronous_trial() -> Trial {
    // Several seconds longer than the ~1-2 s failover measured here.
    let ttl = Duration::from_secs(8);
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());

    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = Arc::new(holder.acquire(KEY, ttl).unwrap().expect("a free key"));
    let token = lease.token();
    let elector = Elector::new(&db)
        .with_holder("holder")
        .unwrap()
        .with_ttl(ttl)
        .unwrap()
        .with_retry_period(Duration::from_millis(500))
        .unwrap();
    let leadership = elector.campaign().unwrap();
    let term = elected(&leadership);

    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let acked_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let failed = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut writer = {
        let (db, holder, elector) = (db.clone(), holder.clone(), leadership.elector().clone());
        let (acked, failed, refused) = (acked.clone(), failed.clone(), refused.clone());
        let acked_at = acked_at.clone();
        Looping::start(WRITE_EVERY, move || {
            match fenced_write(&db, &holder, token, Some((&elector, term)), "holder") {
                Write::Acked(id) => {
                    acked.lock().unwrap().push(id);
                    acked_at.lock().unwrap().push(Instant::now());
                }
                Write::Refused => {
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                Write::Failed => {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let grants = Arc::new(AtomicUsize::new(0));
    let mut contender = {
        let leases = Leases::new(&db).with_owner("contender").unwrap();
        let elector = Elector::new(&db)
            .with_holder("contender")
            .unwrap()
            .with_ttl(ttl)
            .unwrap();
        let grants = grants.clone();
        Looping::start(POLL_EVERY, move || {
            if let Ok(Some(_)) = leases.try_acquire(KEY, ttl) {
                grants.fetch_add(1, Ordering::SeqCst);
            }
            if let Ok(true) = elector.is_leader() {
                grants.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let acks = || acked.lock().unwrap().len();
    wait_for("20 fenced writes before", Duration::from_secs(20), || {
        (acks() >= 20).then_some(())
    });

    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();
    let before = acks();
    wait_for("20 fenced writes after", Duration::from_secs(30), || {
        (acks() >= before + 20).then_some(())
    });
    writer.stop();
    contender.stop();

    let lease_survived = lease.is_held() && lease.loss().is_none();
    let leadership_survived = leadership.term() == Some(term);
    let acked = acked.lock().unwrap().clone();
    let write_gap = acked_at
        .lock()
        .unwrap()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let rows = ledger(pg.url());
    let on_new = writes(&rows);
    let lost_acked = acked.iter().filter(|id| !on_new.contains(id)).count();
    assert_ledger_ordered(&rows);
    let row = holder.holder(KEY).unwrap().expect("the lease row");
    assert_eq!((row.owner.as_str(), row.token), ("holder", token));
    assert_eq!(
        refused.load(Ordering::SeqCst),
        0,
        "no fence refused the holder"
    );

    // New tenures after the promotion get larger tokens and terms, once the hold-off that follows
    // a promotion (one longest TTL) has passed; a Db that opts out grants at once.
    Arc::into_inner(lease).unwrap().release().unwrap();
    leadership.stop().unwrap();
    let next = Leases::new(&db).with_owner("next").unwrap();
    assert!(next.try_acquire(KEY, ttl).unwrap().is_none(), "held off");
    let eager = Leases::new(&db.clone().with_promotion_hold_off(false))
        .with_owner("eager")
        .unwrap();
    let early = eager
        .try_acquire(KEY, ttl)
        .unwrap()
        .expect("no hold-off when opted out");
    assert!(early.token() > token);
    assert!(eager.release(KEY).unwrap());
    let next = wait_for("the hold-off to pass", ttl * 2, || {
        next.try_acquire(KEY, ttl).ok().flatten()
    });
    let successor_wait = promoted.elapsed();
    let next_elector = Elector::new(&db)
        .with_holder("next")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    wait_for("the election's hold-off to pass", ttl * 2, || {
        next_elector.is_leader().ok().filter(|l| *l)
    });
    let trial = Trial {
        outage,
        lease_survived: Some(lease_survived),
        leadership_survived: Some(leadership_survived),
        successor_wait: Some(successor_wait),
        write_gap: Some(write_gap),
        acked: acked.len(),
        lost_acked,
        contender_grants: grants.load(Ordering::SeqCst),
        token_before: token,
        token_after: next.token(),
        term_before: term,
        term_after: next_elector.term().unwrap(),
    };
    pg.stop().unwrap();
    trial
}

#[test]
fn a_synchronous_failover_keeps_every_acknowledged_write_the_lease_and_the_leadership() {
    init_logs();
    let trials: Vec<Trial> = (0..3).map(|_| synchronous_trial()).collect();
    print_table(
        "synchronous standby, primary killed and standby promoted",
        &trials,
    );
    for t in &trials {
        assert_eq!(t.lost_acked, 0, "{t:?}");
        assert_eq!(t.lease_survived, Some(true), "{t:?}");
        assert_eq!(t.leadership_survived, Some(true), "{t:?}");
        assert_eq!(t.contender_grants, 0, "{t:?}");
        assert!(t.token_after > t.token_before, "{t:?}");
        assert!(t.term_after > t.term_before, "{t:?}");
        assert!(t.acked >= 40, "{t:?}");
    }
}

/// After a failover that nobody asks a grant of, the holder's own renewal tells the new primary's
/// promotion record that it was promoted, so the hold-off starts then: a grant asked long after the
/// promotion waits for nothing (it used to start the hold-off itself, and wait a whole TTL).
#[test]
fn a_renewal_starts_the_hold_off_so_a_later_grant_waits_for_nothing() {
    init_logs();
    // Long enough that the lease outlives the outage on a loaded machine (two servers per test,
    // tests in parallel on two cores): a lease lost during the failover renews nothing after it.
    let ttl = Duration::from_secs(10);
    let pg = ReplicatedPostgres::start(Replication::Synchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());
    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();

    // Only the holder's renewals reach the new primary.
    let recorded = format!(
        "SELECT seen_at IS NOT NULL AND grants_from <= now() + interval '{} seconds'
           FROM pgtenure_leases_promotion",
        ttl.as_secs()
    );
    wait_for("the promotion recorded", ttl, || {
        assert!(
            lease.is_held(),
            "the lease lapsed during a {outage:?} outage: {:?}",
            lease.loss()
        );
        client(pg.url())
            .query_one(recorded.as_str(), &[])
            .ok()
            .and_then(|row| row.get::<_, bool>(0).then_some(()))
    });
    let recorded_after = promoted.elapsed();
    wait_for("the hold-off to pass", ttl * 2, || {
        client(pg.url())
            .query_one(
                "SELECT grants_from <= now() FROM pgtenure_leases_promotion",
                &[],
            )
            .ok()
            .and_then(|row| row.get::<_, bool>(0).then_some(()))
    });
    let contender = Leases::new(&db).with_owner("contender").unwrap();
    let grant = contender.try_acquire(UNSEEN, ttl).unwrap();
    assert!(
        grant.is_some(),
        "the first grant after the hold-off passed is granted at once: {:?}",
        contender.refusal(UNSEEN)
    );
    assert!(
        lease.is_held(),
        "the holder kept its lease across the failover"
    );
    println!(
        "\nsynchronous standby: the holder's renewal recorded the promotion {} ms after it; the \
         first grant, {} ms after the promotion, was granted at once",
        recorded_after.as_millis(),
        promoted.elapsed().as_millis()
    );
    drop(lease);
    pg.stop().unwrap();
}
