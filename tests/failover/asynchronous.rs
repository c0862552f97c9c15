//! A lagging asynchronous standby promoted: acknowledged writes are lost, but stale fenced writes
//! are refused, the ledger stays ordered, no token or term is handed out again, and nothing is
//! granted that the old holder still believes it holds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::wait_for;
use pgtenure::testing::{ReplicatedPostgres, Replication};
use pgtenure::{
    elector::Elector,
    leases::{Leases, Refusal},
};

use super::{
    assert_ledger_ordered, create_tables, elected, fenced_write, init_logs, ledger, pool,
    print_table, writes, Looping, Trial, Write, FLEET, KEY, UNSEEN, UNSEEN_LEADER, UNSEEN_LEASES,
    WRITE_EVERY,
};

/// What an asynchronous trial found beyond the table's figures.
#[derive(Debug, Default)]
struct Lagging {
    trial: Trial,
    /// Bytes of WAL the standby had not received when the primary was killed.
    lag: u64,
    /// Fenced writes of tenures the new primary never heard of, or of the old holder after a
    /// successor took the key: refused, or (never) acknowledged.
    stale_refused: usize,
    stale_acked: usize,
}

/// Retries `write` while it fails (a pooled connection to the dead primary), up to 10 s.
fn settled(mut write: impl FnMut() -> Write) -> Write {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match write() {
            Write::Failed if Instant::now() < deadline => {
                // The poll interval of a bounded wait (10 s) on a write to the new primary.
                std::thread::sleep(Duration::from_millis(20))
            }
            other => return other,
        }
    }
}

/// One asynchronous trial: the holder writes fenced rows while the standby follows; replication is
/// frozen; on the primary alone the holder writes on, then releases and resigns, and 40 other
/// owners take the key and the leadership in turn (each tenure a new token and term, each writing
/// a fenced row), the last of them ("stale") still holding both; the primary is killed and the
/// standby promoted; a successor takes over on the new primary.
fn asynchronous_trial() -> Lagging {
    let ttl = Duration::from_secs(3);
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());

    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let token = lease.token();
    let elector = Elector::new(&db)
        .with_holder("holder")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    let leadership = elector.campaign().unwrap();
    let term = elected(&leadership);
    let acked = Arc::new(Mutex::new(Vec::<i64>::new()));
    let mut writer = {
        let (db, holder, elector) = (db.clone(), holder.clone(), leadership.elector().clone());
        let acked = acked.clone();
        Looping::start(WRITE_EVERY, move || {
            if let Write::Acked(id) =
                fenced_write(&db, &holder, token, Some((&elector, term)), "holder")
            {
                acked.lock().unwrap().push(id);
            }
        })
    };
    let acks = || acked.lock().unwrap().len();
    wait_for("20 fenced writes", Duration::from_secs(20), || {
        (acks() >= 20).then_some(())
    });

    pg.freeze_replication();
    let frozen_at = acks();
    wait_for(
        "10 fenced writes the standby never gets",
        Duration::from_secs(20),
        || (acks() >= frozen_at + 10).then_some(()),
    );
    writer.stop();
    lease.release().unwrap();
    leadership.stop().unwrap();
    let (mut max_token, mut max_term) = (token, term);
    let mut last = None;
    for i in 0..40 {
        let owner = if i == 39 {
            "stale".to_owned()
        } else {
            format!("churn{i}")
        };
        let leases = Leases::new(&db).with_owner(&owner).unwrap();
        let grant = leases
            .try_acquire(KEY, Duration::from_secs(60))
            .unwrap()
            .expect("free");
        let elector = Elector::new(&db)
            .with_holder(&owner)
            .unwrap()
            .with_ttl(Duration::from_secs(60))
            .unwrap();
        assert!(elector.is_leader().unwrap(), "{owner} is elected");
        let term = elector.term().unwrap();
        assert!(grant.token() > max_token && term > max_term);
        (max_token, max_term) = (grant.token(), term);
        match fenced_write(&db, &leases, grant.token(), Some((&elector, term)), &owner) {
            Write::Acked(id) => acked.lock().unwrap().push(id),
            _ => panic!("{owner}'s fenced write on the primary"),
        }
        if i < 39 {
            assert!(leases.release(KEY).unwrap());
            elector.resign().unwrap();
        } else {
            last = Some((leases, grant.token(), elector, term));
        }
    }
    let (stale, stale_token, stale_elector, stale_term) = last.unwrap();
    let lag = pg.replication_lag().unwrap();
    assert!(lag > 0, "the standby lags");

    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();
    let mut result = Lagging {
        lag,
        ..Lagging::default()
    };
    let mut stale_write = |w: Write| match w {
        Write::Acked(_) => result.stale_acked += 1,
        Write::Refused => result.stale_refused += 1,
        Write::Failed => panic!("a fenced write failed 10 s after the promotion"),
    };
    // The holder of the key on the old primary: its tenure never reached the new one.
    stale_write(settled(|| {
        fenced_write(
            &db,
            &stale,
            stale_token,
            Some((&stale_elector, stale_term)),
            "stale",
        )
    }));
    stale_write(settled(|| {
        fenced_write(&db, &stale, stale_token, None, "stale")
    }));

    // A successor takes the key and the leadership once the tenures the new primary knows lapse
    // and the hold-off after the promotion (the TTL, as it asks for the holder's) has passed.
    let successor = Leases::new(&db).with_owner("successor").unwrap();
    let successor_elector = Elector::new(&db)
        .with_holder("successor")
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    let (mut grant, mut elected) = (None, false);
    wait_for(
        "the successor's grant and election",
        Duration::from_secs(15),
        || {
            if grant.is_none() {
                grant = successor.try_acquire(KEY, ttl).ok().flatten();
            }
            elected = elected || successor_elector.is_leader().unwrap_or(false);
            (grant.is_some() && elected).then_some(())
        },
    );
    let grant = grant.unwrap();
    let successor_wait = promoted.elapsed();
    let successor_term = successor_elector.term().unwrap();
    for _ in 0..5 {
        let w = fenced_write(
            &db,
            &successor,
            grant.token(),
            Some((&successor_elector, successor_term)),
            "successor",
        );
        assert!(matches!(w, Write::Acked(_)), "the successor writes");
    }
    // The old holder and the stale one, now that a successor holds the key.
    stale_write(fenced_write(
        &db,
        &holder,
        token,
        Some((&elector, term)),
        "holder",
    ));
    stale_write(fenced_write(&db, &holder, token, None, "holder"));
    stale_write(fenced_write(&db, &stale, stale_token, None, "stale"));

    let rows = ledger(pg.url());
    assert_ledger_ordered(&rows);
    let on_new = writes(&rows);
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked[frozen_at..].iter().all(|w| !on_new.contains(w)),
        "a write acknowledged after the freeze reached the standby"
    );
    // The new primary's own history only grows.
    assert!(grant.token() > token && successor_term > term);
    result.trial = Trial {
        outage,
        acked: acked.len(),
        lost_acked: acked.iter().filter(|id| !on_new.contains(id)).count(),
        token_before: max_token,
        token_after: grant.token(),
        term_before: max_term,
        term_after: successor_term,
        successor_wait: Some(successor_wait),
        ..Trial::default()
    };
    pg.stop().unwrap();
    result
}

fn print_lagging(title: &str, trials: &[Lagging]) {
    let table: Vec<Trial> = trials.iter().map(|t| t.trial.clone()).collect();
    print_table(title, &table);
    for (i, t) in trials.iter().enumerate() {
        println!(
            " trial {}: {} bytes of WAL unreplicated at the kill; stale fenced writes refused {}, \
             acknowledged {}",
            i + 1,
            t.lag,
            t.stale_refused,
            t.stale_acked
        );
    }
}

#[test]
fn an_asynchronous_failover_refuses_stale_fenced_writes_and_keeps_the_ledger_ordered() {
    init_logs();
    let trials: Vec<Lagging> = (0..3).map(|_| asynchronous_trial()).collect();
    print_lagging(
        "asynchronous standby, frozen, primary killed and standby promoted",
        &trials,
    );
    for t in &trials {
        assert_eq!(t.stale_acked, 0, "{t:?}");
        assert_eq!(t.stale_refused, 5, "{t:?}");
        assert!(
            t.trial.lost_acked > 0,
            "the frozen standby lost acknowledged writes: {t:?}"
        );
    }
}

/// Every token and term granted after the promotion is greater than every one handed out before it,
/// those lost with the old primary included.
#[test]
fn an_asynchronous_failover_never_hands_out_a_token_or_term_again() {
    init_logs();
    let lagging = asynchronous_trial();
    let t = lagging.trial.clone();
    print_lagging(
        "asynchronous standby: tokens and terms across the promotion",
        &[lagging],
    );
    assert!(
        t.token_after > t.token_before,
        "token {} granted after the promotion, {} already handed out before",
        t.token_after,
        t.token_before
    );
    assert!(
        t.term_after > t.term_before,
        "term {} granted after the promotion, {} already handed out before",
        t.term_after,
        t.term_before
    );
}

/// The worst case: replication frozen longer than the TTL while the holder renews its lease
/// and leadership on the primary alone, so the promoted standby has them lapsed; and a key and a
/// leadership won after the freeze, which the standby never sees at all. A contender polls all four
/// every 10 ms from the promotion on. The new primary holds grants of lapsed and absent keys and
/// leaderships off after it first sees its new timeline, so the contender is granted nothing while
/// the old holder still believes it holds it, and the old holder's fenced writes are refused.
#[test]
fn an_asynchronous_failover_grants_nothing_the_old_holder_still_believes_it_holds() {
    init_logs();
    let ttl = Duration::from_secs(3);
    let pg = ReplicatedPostgres::start(Replication::Asynchronous).unwrap();
    let db = pool(&pg);
    create_tables(&db, pg.primary_url());
    let holder = Leases::new(&db).with_owner("holder").unwrap();
    let unseen_holder = Leases::new(&db)
        .with_table(UNSEEN_LEASES)
        .unwrap()
        .with_owner("holder")
        .unwrap();
    unseen_holder.create_table().unwrap();
    let campaign = |table: &str, name: &str| {
        let leadership = Elector::new(&db)
            .with_table(table)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder("holder")
            .unwrap()
            .with_ttl(ttl)
            .unwrap()
            .campaign()
            .unwrap();
        let term = elected(&leadership);
        (leadership, term)
    };
    let lease = holder.acquire(KEY, ttl).unwrap().expect("a free key");
    let (leadership, term) = campaign(pgtenure::elector::DEFAULT_TABLE, FLEET);
    Elector::new(&db)
        .with_table(UNSEEN_LEADER)
        .unwrap()
        .create_table()
        .unwrap();
    wait_for("the standby to catch up", Duration::from_secs(10), || {
        (pg.replication_lag().ok() == Some(0)).then_some(())
    });

    pg.freeze_replication();
    let unseen = unseen_holder
        .acquire(UNSEEN, ttl)
        .unwrap()
        .expect("a free key");
    let (unseen_leadership, unseen_term) = campaign(UNSEEN_LEADER, UNSEEN);
    let unseen_term = Some(unseen_term);
    // The standby misses every renewal for longer than the TTL (real time is the subject: a pause
    // past the TTL, so the standby's rows expire by its clock).
    std::thread::sleep(ttl + Duration::from_millis(500));
    assert!(
        lease.is_held()
            && unseen.is_held()
            && leadership.is_leading()
            && unseen_leadership.is_leading(),
        "renewed on the primary"
    );
    let outage = pg.fail_over().unwrap();
    let promoted = Instant::now();

    let contender = Leases::new(&db).with_owner("contender").unwrap();
    let unseen_contender = Leases::new(&db)
        .with_table(UNSEEN_LEASES)
        .unwrap()
        .with_owner("contender")
        .unwrap();
    let contender_elector = |table: &str, name: &str| {
        Elector::new(&db)
            .with_table(table)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder("contender")
            .unwrap()
            .with_ttl(ttl)
            .unwrap()
    };
    let fleet_elector = contender_elector(pgtenure::elector::DEFAULT_TABLE, FLEET);
    let unseen_elector = contender_elector(UNSEEN_LEADER, UNSEEN);
    let mut first_refusal = None;
    let mut grant = None;
    // (what, granted this many ms after the promotion, the old holder believing it held it)
    let mut granted: Vec<(&str, u128, bool)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while granted.len() < 4 && Instant::now() < deadline {
        let done = |what: &str, granted: &Vec<(&str, u128, bool)>| {
            granted.iter().any(|(w, _, _)| *w == what)
        };
        let ms = || promoted.elapsed().as_millis();
        if !done("lease", &granted) {
            match contender.try_acquire(KEY, ttl) {
                Ok(Some(g)) => {
                    granted.push(("lease", ms(), lease.is_held()));
                    grant = Some(g);
                }
                Ok(None) if first_refusal.is_none() => {
                    first_refusal = contender.refusal(KEY).ok();
                }
                _ => {}
            }
        }
        if !done("unseen lease", &granted) {
            if let Ok(Some(_)) = unseen_contender.try_acquire(UNSEEN, ttl) {
                granted.push(("unseen lease", ms(), unseen.is_held()));
            }
        }
        // The old holder's campaign competes too once the hold-off is over, and on a loaded machine
        // it sometimes wins first (with a new term: it believes in that one, not the lost one).
        // Then it is asked to step down, so the contender's grant can be checked.
        if !done("leadership", &granted) {
            if fleet_elector.is_leader().unwrap_or(false) {
                granted.push(("leadership", ms(), leadership.is_leading()));
            } else if leadership.term().is_some_and(|t| t > term) {
                let _ = fleet_elector.request_resign();
            }
        }
        if !done("unseen leadership", &granted) {
            if unseen_elector.is_leader().unwrap_or(false) {
                granted.push(("unseen leadership", ms(), unseen_leadership.is_leading()));
            } else if unseen_leadership.term().is_some() && unseen_leadership.term() != unseen_term
            {
                let _ = unseen_elector.request_resign();
            }
        }
        // Real time is the subject: the contenders ask every 10 ms, and when each is first
        // granted (in ms since the failover) is what the test reports.
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "\nasynchronous standby frozen {} ms (TTL {} ms), primary killed: outage {} ms; granted \
         to the contender (ms after the promotion, the old holder still believing it held it): \
         {granted:?}",
        (ttl + Duration::from_millis(500)).as_millis(),
        ttl.as_millis(),
        outage.as_millis(),
    );
    assert_eq!(
        granted.len(),
        4,
        "everything granted within 15 s: {granted:?}"
    );
    assert!(
        granted.iter().all(|(_, _, believed)| !believed),
        "granted while the old holder believed it held it: {granted:?}"
    );
    assert!(
        matches!(first_refusal, Some(Refusal::HeldOff { .. })),
        "the contender's first refusal: {first_refusal:?}"
    );

    // Writes stay safe: the old holder's fences fail, the contender's pass.
    let grant = grant.unwrap();
    let holder_write = settled(|| {
        fenced_write(
            &db,
            &holder,
            lease.token(),
            Some((leadership.elector(), term)),
            "holder",
        )
    });
    assert!(
        matches!(holder_write, Write::Refused),
        "the old holder's write"
    );
    let contender_write = fenced_write(
        &db,
        &contender,
        grant.token(),
        Some((&fleet_elector, fleet_elector.term().unwrap())),
        "contender",
    );
    assert!(
        matches!(contender_write, Write::Acked(_)),
        "the contender's write"
    );
    assert!(grant.token() > lease.token().max(unseen.token()));
    assert_ledger_ordered(&ledger(pg.url()));
    drop((lease, unseen, leadership, unseen_leadership));
    pg.stop().unwrap();
}
