//! An elector polled by hand: `is_leader` and its local deadline, `resign` and a requested
//! resignation, term fences, fleets sharing a table, bad input, and the hold-off after a promotion.

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{self, client, db, wait_for, Tables};
use pgtenure::{elector::Elector, ErrorKind};

use super::table;

fn elector(table: &str, holder: &str, ttl: Duration) -> Elector {
    elector_on(&db(), table, holder, ttl)
}

fn elector_on(db: &pgtenure::Db, table: &str, holder: &str, ttl: Duration) -> Elector {
    Elector::new(db)
        .with_table(table)
        .unwrap()
        .with_name("fleet")
        .unwrap()
        .with_holder(holder)
        .unwrap()
        .with_ttl(ttl)
        .unwrap()
}

/// A span during which one elector believed it led: from the answer to the end of its belief.
#[derive(Debug, Clone)]
struct Belief {
    holder: String,
    term: i64,
    from: Instant,
    until: Instant,
}

#[test]
fn five_polling_electors_never_have_two_leaders_and_terms_increase() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_millis(300);
    let run_for = Duration::from_secs(4);
    let t = table.clone();
    let beliefs: Vec<Vec<Belief>> = common::race(5, move |i| {
        let e = elector(&t, &format!("node-{i}"), ttl);
        let start = Instant::now();
        let mut beliefs: Vec<Belief> = Vec::new();
        let mut led_polls = 0;
        while start.elapsed() < run_for {
            let sent = Instant::now();
            let leader = e.is_leader().unwrap();
            let answered = Instant::now();
            // A belief ends at the next answer, and never after the local deadline.
            if let Some(last) = beliefs.last_mut() {
                last.until = last.until.min(answered);
            }
            if leader {
                led_polls += 1;
                beliefs.push(Belief {
                    holder: e.holder().to_owned(),
                    term: e.term().expect("a leader has a term"),
                    from: answered,
                    until: sent + ttl,
                });
                if led_polls % 15 == 0 {
                    // Resign now and then: the hand-over must not wait for the TTL. The belief ends
                    // when the instance decides to resign, before the statement is sent.
                    beliefs.last_mut().unwrap().until = Instant::now();
                    e.resign().unwrap();
                } else if led_polls % 15 == 7 {
                    // Or stop polling, as a crashed leader would (real time is the subject: a
                    // pause past the TTL).
                    thread::sleep(ttl * 2);
                }
            } else {
                assert_eq!(e.term(), None);
            }
            // Real time is the subject: each instance polls by hand every 20 ms, as its loop would.
            thread::sleep(Duration::from_millis(20));
        }
        beliefs
    });
    let mut all: Vec<Belief> = beliefs.into_iter().flatten().collect();
    all.sort_by_key(|b| b.from);
    assert!(!all.is_empty());
    // No two holders ever believed they led at the same moment.
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            if a.holder != b.holder {
                assert!(
                    a.until <= b.from || b.until <= a.from,
                    "overlap: {a:?} and {b:?}"
                );
            }
        }
    }
    // Each term has one holder, and terms strictly increase in the order leadership began.
    let mut terms: BTreeMap<i64, (String, Instant)> = BTreeMap::new();
    for b in &all {
        let entry = terms.entry(b.term).or_insert((b.holder.clone(), b.from));
        assert_eq!(entry.0, b.holder, "term {} has two holders", b.term);
    }
    let mut by_start: Vec<(Instant, i64)> = terms
        .iter()
        .map(|(term, (_, from))| (*from, *term))
        .collect();
    by_start.sort();
    assert!(
        by_start.windows(2).all(|w| w[0].1 < w[1].1),
        "terms do not increase: {by_start:?}"
    );
    println!("{} tenures, {} leader answers", terms.len(), all.len());
    assert!(
        terms.len() >= 3,
        "leadership changed hands only {} times",
        terms.len()
    );
}

#[test]
fn resign_hands_over_on_the_next_poll_and_leader_reports_who_leads() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(60);
    let a = elector(&table, "a", ttl);
    let b = elector(&table, "b", ttl);
    assert_eq!(a.leader().unwrap(), None);
    assert!(a.is_leader().unwrap());
    assert!(!b.is_leader().unwrap());
    let info = b.leader().unwrap().expect("a leads");
    assert_eq!(info.holder, "a");
    assert_eq!(Some(info.term), a.term());
    assert_eq!(
        info.expires_at.duration_since(info.elected_at).unwrap(),
        ttl
    );
    assert!(a.is_leader().unwrap(), "renewal");
    let renewed = a.leader().unwrap().unwrap();
    assert_eq!(renewed.term, info.term, "a renewal keeps the term");
    assert_eq!(renewed.elected_at, info.elected_at);
    assert!(renewed.expires_at > info.expires_at);

    a.resign().unwrap();
    assert_eq!(a.term(), None);
    assert_eq!(
        a.leader().unwrap(),
        None,
        "nobody leads after a resignation"
    );
    assert!(
        b.is_leader().unwrap(),
        "b wins at once, without waiting 60 s"
    );
    let next = a.leader().unwrap().unwrap();
    assert_eq!(next.holder, "b");
    assert!(next.term > info.term);
    assert_eq!(b.term(), Some(next.term));
    a.resign().unwrap();
    assert_eq!(
        a.leader().unwrap().unwrap().holder,
        "b",
        "a stale resign changes nothing"
    );
}

#[test]
fn a_leader_that_stops_polling_is_replaced_after_its_ttl() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_millis(300);
    let a = elector(&table, "a", ttl);
    let b = elector(&table, "b", ttl);
    assert!(a.is_leader().unwrap());
    let first = a.leader().unwrap().unwrap();
    assert!(!b.is_leader().unwrap());
    wait_for("b to take over", Duration::from_secs(5), || {
        b.is_leader().unwrap().then_some(())
    });
    let second = b.leader().unwrap().unwrap();
    assert!(second.term > first.term);
    assert!(
        second.elected_at >= first.expires_at,
        "b elected before a's tenure expired"
    );
    assert!(!a.is_leader().unwrap(), "a comes back as a follower");
    assert_eq!(a.term(), None);
}

#[test]
fn is_leader_never_answers_true_past_the_local_deadline() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_millis(200);
    let a = elector(&table, "a", ttl);
    assert!(a.is_leader().unwrap());
    let first_term = a.term().unwrap();
    // Hold the row so the next poll waits longer than the TTL before the database answers.
    let mut blocker = client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE name = 'fleet' FOR UPDATE"),
        &[],
    )
    .unwrap();
    let blocking: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let poll = thread::spawn(move || {
        let answer = a.is_leader();
        (a, answer)
    });
    // Once the poll waits on the row (on a loaded machine it may take a while to be sent), hold it
    // past the TTL.
    let mut watcher = client();
    wait_for(
        "the poll to wait on the row",
        Duration::from_secs(20),
        || {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                    &[&blocking],
                )
                .unwrap()
                .get(0);
            (waiting > 0).then_some(())
        },
    );
    // Real time is the subject: the row stays locked past the TTL, so the answer comes after the
    // local deadline.
    thread::sleep(ttl + ttl / 2);
    tx.rollback().unwrap();
    let (a, answer) = poll.join().unwrap();
    assert!(!answer.unwrap(), "the answer came after the local deadline");
    assert_eq!(a.term(), None);
    // The database agrees: the renewal's now() was taken before the wait, so that tenure has expired
    // too. The next prompt poll starts a new tenure with a larger term.
    assert_eq!(a.leader().unwrap(), None);
    assert!(a.is_leader().unwrap());
    assert!(a.term().unwrap() > first_term);
}

#[test]
fn term_fenced_writes_are_refused_for_a_stale_leader() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_millis(200);
    let a = elector(&table, "a", ttl);
    let b = elector(&table, "b", ttl);
    assert!(a.is_leader().unwrap());
    let term_a = a.term().unwrap();
    let fenced = |e: &Elector, term: i64| {
        let mut conn = db().connection().unwrap();
        let mut tx = conn.transaction().unwrap();
        let ok = e.fence(&mut tx, term).unwrap();
        tx.commit().unwrap();
        ok
    };
    assert!(fenced(&a, term_a));
    assert!(!fenced(&b, term_a), "not b's term");
    assert!(!fenced(&a, term_a + 1), "not a's term");
    wait_for("b to take over", Duration::from_secs(5), || {
        b.is_leader().unwrap().then_some(())
    });
    let term_b = b.term().unwrap();
    assert!(term_b > term_a);
    assert!(!fenced(&a, term_a), "a stale leader's write is refused");
    assert!(fenced(&b, term_b));
}

#[test]
fn a_database_error_drops_the_cached_leadership() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let a = elector(&table, "a", Duration::from_secs(60));
    assert!(a.is_leader().unwrap());
    assert!(a.term().is_some());
    client()
        .batch_execute(&format!("DROP TABLE {table}"))
        .unwrap();
    let err = a.is_leader().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database);
    assert_eq!(a.term(), None);
}

#[test]
fn fleets_share_a_table_and_elect_independently() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(60);
    let billing = elector(&table, "a", ttl).with_name("billing").unwrap();
    let search = elector(&table, "b", ttl).with_name("search").unwrap();
    assert_eq!(billing.name(), "billing");
    assert!(billing.is_leader().unwrap());
    assert!(search.is_leader().unwrap());
    let other = elector(&table, "c", ttl).with_name("billing").unwrap();
    assert!(!other.is_leader().unwrap());
    assert_eq!(other.leader().unwrap().unwrap().holder, "a");
    assert_eq!(search.leader().unwrap().unwrap().holder, "b");
    assert_eq!(Elector::new(&db()).ttl(), pgtenure::elector::DEFAULT_TTL);
    assert_eq!(Elector::new(&db()).name(), "default");
}

#[test]
fn bad_input_is_refused_before_any_statement() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let long = "n".repeat(1025);
    for bad in ["", " ", "a\0b", long.as_str()] {
        assert!(
            Elector::new(&db())
                .with_name(bad)
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
        assert!(
            Elector::new(&db())
                .with_holder(bad)
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
    }
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(1),
        Duration::from_secs(101 * 366 * 86_400),
    ] {
        assert!(
            Elector::new(&db())
                .with_ttl(ttl)
                .unwrap_err()
                .is_invalid_input(),
            "{ttl:?}"
        );
    }
    for bad in ["x; drop table y", "\"a\"", "a.b.c", &"e".repeat(64)] {
        assert!(
            Elector::new(&db())
                .with_table(bad)
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
    }
    assert_eq!(common::count(&mut client(), &table), 0);
}

#[test]
fn a_second_elector_with_the_same_holder_never_ends_or_adopts_the_first_ones_term() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let first = elector(&table, "same", Duration::from_secs(30));
    let second = elector(&table, "same", Duration::from_secs(30));
    assert!(first.is_leader().unwrap());
    let term = first.term().unwrap();
    // The second has won nothing: its resignation ends nothing, its poll takes nothing.
    second.resign().unwrap();
    assert_eq!(first.leader().unwrap().unwrap().term, term);
    assert!(!second.is_leader().unwrap());
    assert!(first.is_leader().unwrap());

    // The first term ends (an operator expires it); the second wins a new one.
    client()
        .execute(&format!("UPDATE {table} SET expires_at = now()"), &[])
        .unwrap();
    assert!(second.is_leader().unwrap());
    let newer = second.term().unwrap();
    assert!(newer > term);
    // The first learns it lost; it never adopts the second's term.
    assert!(!first.is_leader().unwrap());
    assert_eq!(first.term(), None);
    assert!(
        !first.is_leader().unwrap(),
        "still not, while the second leads"
    );
    first.resign().unwrap();
    assert_eq!(
        first.leader().unwrap().unwrap().term,
        newer,
        "its resign ended nothing"
    );
    assert!(second.is_leader().unwrap());
}

/// A requested resignation reaches a leader that polls with `is_leader` too: its next poll answers
/// `false` without extending or ending the tenure (the leader stops believing first), the poll after
/// that resigns it and stands aside, and another elector's next poll wins.
#[test]
fn a_requested_resignation_ends_the_tenure_after_the_leader_stopped_believing() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(30);
    let (a, b) = (elector(&table, "a", ttl), elector(&table, "b", ttl));
    assert!(a.is_leader().unwrap());
    let term = a.term().unwrap();
    assert!(!b.is_leader().unwrap());
    assert!(b.request_resign().unwrap(), "a live leader was asked");
    assert!(a.term().is_some(), "it learns at its next poll");
    let before = b.leader().unwrap().unwrap();
    assert!(before.resign_requested);
    assert!(!a.is_leader().unwrap(), "the poll tells it to step down");
    assert_eq!(a.term(), None);
    let after = b
        .leader()
        .unwrap()
        .expect("the tenure is not ended by that poll");
    assert_eq!(
        (after.holder.as_str(), after.term, after.expires_at),
        ("a", term, before.expires_at),
        "nor extended"
    );
    assert!(
        !b.is_leader().unwrap(),
        "nobody else wins before the leader resigns"
    );
    assert!(
        !a.is_leader().unwrap(),
        "its next poll resigns and stands aside"
    );
    assert_eq!(a.leader().unwrap(), None);
    assert!(b.is_leader().unwrap(), "without waiting for the TTL");
    assert!(b.term().unwrap() > term);
    // Nobody to ask once nobody leads.
    b.resign().unwrap();
    assert!(!a.request_resign().unwrap());
}

/// A promotion as a poll finds it (the record names another timeline than the server's; the
/// promotion itself is `tests/failover/`'s): the poll is answered `stale`, reads the record again
/// and records the promotion, and an election of a lapsed or absent leadership waits one longest
/// TTL; the live leader's renewal does not.
#[test]
fn a_hold_off_after_a_promotion_delays_the_next_election_but_not_the_leaders_renewal() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let a = elector(&table, "a", Duration::from_secs(3));
    let b = elector(&table, "b", Duration::from_secs(3));
    let other = elector(&table, "a", Duration::from_millis(300))
        .with_name("other")
        .unwrap();
    assert!(a.is_leader().unwrap());
    assert!(other.is_leader().unwrap());
    let lapsed_term = other.term().unwrap();
    let mut c = client();
    wait_for(
        "the short leadership to lapse",
        Duration::from_secs(5),
        || {
            let live: bool = c
                .query_one(
                    &format!("SELECT expires_at > now() FROM {table} WHERE name = 'other'"),
                    &[],
                )
                .unwrap()
                .get(0);
            (!live).then_some(())
        },
    );
    c.batch_execute(&format!(
        "UPDATE {table}_promotion SET timeline = timeline + 1000"
    ))
    .unwrap();
    let held_off = Instant::now();
    // A process that starts now: it reads the record, finds another timeline than the server's,
    // and records the promotion.
    let after = common::fresh_db();
    let elector_after = |holder: &str, name: &str| {
        elector_on(&after, &table, holder, Duration::from_secs(1))
            .with_name(name)
            .unwrap()
    };
    let b_other = elector_after("b", "other");
    assert!(!b_other.is_leader().unwrap(), "a lapsed leadership");
    assert!(
        !elector_after("a", "other").is_leader().unwrap(),
        "its old holder, elected again"
    );
    assert!(
        !elector_after("b", "new").is_leader().unwrap(),
        "a fleet nobody led"
    );
    assert!(a.is_leader().unwrap(), "the live leader's renewal");
    assert!(!b.is_leader().unwrap());
    wait_for("the hold-off to end", Duration::from_secs(10), || {
        b_other.is_leader().unwrap().then_some(())
    });
    assert!(
        held_off.elapsed() >= Duration::from_millis(2500),
        "elected {} ms into a 3 s hold-off",
        held_off.elapsed().as_millis()
    );
    assert!(b_other.term().unwrap() > lapsed_term);
}

/// An asynchronous standby that never received the last election: its row names an older holder
/// ("a", lapsed) than the real last leader ("b"). After the hold-off, "b" (its polls carry the
/// newest term it won, which the standby lost, above the row's) is a last holder the preference
/// waits for, not a member that waits one retry period (here 30 s) longer; and it believes nothing
/// meanwhile.
#[test]
fn after_a_promotion_the_leader_an_asynchronous_standby_never_saw_elected_is_preferred() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(1);
    let db = common::fresh_db();
    let b = elector_on(&db, &table, "b", ttl)
        .with_retry_period(Duration::from_secs(30))
        .unwrap();
    assert!(b.is_leader().unwrap());
    let lost_term = b.term().unwrap();
    // The promoted standby: the row as before "b"'s election, lapsed, and a promotion to record.
    let mut c = client();
    c.batch_execute(&format!(
        "UPDATE {table} SET holder = 'a', term = {older}, expires_at = now() - interval '1 s'; \
         UPDATE {table}_promotion SET timeline = timeline + 1000",
        older = lost_term - 1
    ))
    .unwrap();
    // A clone of "b" (its tenure shared) that asks a longer TTL than the record knows reads the
    // record again, as a poll answered `stale` does after a real promotion: it records the
    // promotion and is held off.
    let b_longer = b.clone().with_ttl(Duration::from_secs(2)).unwrap();
    let held_off = Instant::now();
    assert!(!b_longer.is_leader().unwrap(), "held off");
    assert_eq!(b.term(), None, "held off, it believes nothing");
    let won = wait_for(
        "the last leader re-elected as the hold-off ends",
        Duration::from_secs(10),
        || b.is_leader().unwrap().then(|| b.term().unwrap()),
    );
    assert!(
        held_off.elapsed() >= Duration::from_millis(900),
        "elected {} ms into a 1 s hold-off (the TTL the record knew)",
        held_off.elapsed().as_millis()
    );
    assert!(won > lost_term, "a new term {won} above {lost_term}");
}

/// The preference after a promotion's hold-off is the poller's retry period, at most its TTL: a
/// caller of `is_leader` of its own (no campaign, so nothing checks the period against the TTL)
/// with an hour's retry period wins a lapsed leadership of another holder a TTL after the hold-off,
/// not an hour.
#[test]
fn after_a_promotion_another_member_waits_at_most_a_ttl_more() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(1);
    let a = elector(&table, "a", ttl);
    assert!(a.is_leader().unwrap());
    let lapsed_term = a.term().unwrap();
    let mut c = client();
    c.batch_execute(&format!(
        "UPDATE {table} SET expires_at = now() - interval '1 s'; \
         UPDATE {table}_promotion SET timeline = timeline + 1000"
    ))
    .unwrap();
    let b = elector_on(&common::fresh_db(), &table, "b", ttl)
        .with_retry_period(Duration::from_secs(3600))
        .unwrap();
    let held_off = Instant::now();
    assert!(!b.is_leader().unwrap(), "held off");
    let won = wait_for(
        "another member elected a TTL after the hold-off",
        Duration::from_secs(10),
        || b.is_leader().unwrap().then(|| b.term().unwrap()),
    );
    assert!(
        held_off.elapsed() >= Duration::from_millis(1800),
        "elected {} ms after a 1 s hold-off, a TTL before the last holder's turn ended",
        held_off.elapsed().as_millis()
    );
    assert!(won > lapsed_term);
}

/// A `resign` that fails (here a statement timeout: another transaction holds the row) stops the
/// belief at once but keeps the term, so calling it again resigns that term and the next poll
/// elsewhere wins at once, not after the TTL. An `is_leader` after the failure never renews the
/// term: it sends the resignation first (failing as long as the row is locked) and stands aside.
#[test]
fn a_failed_resign_can_be_retried_and_frees_the_leadership_at_once() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(30);
    // Statements give up after 300 ms, as behind a statement timeout set by a role or an operator.
    let timing_out = pgtenure::Db::builder(&common::with_param(
        &common::direct_url(),
        "options",
        "-c%20statement_timeout%3D300",
    ))
    .unwrap()
    .build()
    .unwrap();
    let a = elector_on(&timing_out, &table, "a", ttl);
    let b = elector_on(&timing_out, &table, "b", ttl);
    let lock = |table: &str| {
        let mut blocker = client();
        blocker
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM {table} WHERE name = 'fleet' FOR UPDATE"
            ))
            .unwrap();
        blocker
    };
    let canceled = |e: &pgtenure::Error| {
        e.code() == Some(&pgtenure::postgres::error::SqlState::QUERY_CANCELED)
    };

    // resign() fails, then is called again.
    assert!(a.is_leader().unwrap());
    let first = a.term().unwrap();
    assert!(!b.is_leader().unwrap());
    let mut blocker = lock(&table);
    let err = a.resign().unwrap_err();
    assert!(canceled(&err), "{err}");
    assert_eq!(a.term(), None, "it stops believing at once");
    let polled = a.is_leader();
    assert!(
        polled.as_ref().is_err_and(canceled),
        "is_leader resends the resignation first (failing while the row is locked): {polled:?}"
    );
    assert_eq!(a.term(), None, "and never renews the term it gave up");
    blocker.batch_execute("ROLLBACK").unwrap();
    assert!(
        !b.is_leader().unwrap(),
        "the tenure is live until it is resigned"
    );
    a.resign().unwrap();
    assert_eq!(a.leader().unwrap(), None, "the retry resigned it");
    assert!(
        b.is_leader().unwrap(),
        "b wins at once after the retried resign, not after the 30 s TTL"
    );
    let second = b.term().unwrap();
    assert!(second > first);

    // resign() fails, and the next is_leader() sends it again.
    let mut blocker = lock(&table);
    assert!(canceled(&b.resign().unwrap_err()));
    assert_eq!(b.term(), None);
    blocker.batch_execute("ROLLBACK").unwrap();
    assert!(
        !b.is_leader().unwrap(),
        "it resigns and stands aside, without renewing"
    );
    assert_eq!(b.term(), None);
    assert_eq!(b.leader().unwrap(), None, "is_leader resigned it");
    assert!(a.is_leader().unwrap(), "a wins at once");
    assert!(a.term().unwrap() > second);
    assert!(b.is_leader().is_ok_and(|leads| !leads), "b campaigns again");
}
