//! What operators see and fix, against a real PostgreSQL: who holds a key, every key under a prefix,
//! a forced release and what its holder learns, why an acquire was refused, every job and every
//! fleet's leader.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{client, db, leader_table, lease_table, wait_for, Tables};
use pgtenure::{
    elector::Elector,
    leases::{LeaseLoss, Leases, Refusal},
    tick_claims::TickClaims,
    ErrorKind,
};

fn fence_check(leases: &Leases, key: &str, token: i64) -> bool {
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    let ok = leases.fence(&mut tx, key, token).unwrap();
    tx.commit().unwrap();
    ok
}

#[test]
fn holder_names_the_owner_token_and_liveness_by_the_database_clock() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let a = Leases::new(&db()).with_table(&table).unwrap();
    assert_eq!(a.holder("nobody").unwrap(), None);

    let grant = a
        .try_acquire("short", Duration::from_millis(200))
        .unwrap()
        .unwrap();
    let lease = a.acquire("long", Duration::from_secs(30)).unwrap().unwrap();
    let now: SystemTime = client().query_one("SELECT now()", &[]).unwrap().get(0);

    let long = a.holder("long").unwrap().expect("a row");
    assert_eq!(
        (
            long.key.as_str(),
            long.owner.as_str(),
            long.token,
            long.live
        ),
        ("long", a.owner(), lease.token(), true)
    );
    assert!(!long.superseded);
    assert!(long.held_until > now + Duration::from_secs(20));
    assert!(long.acquired_at <= now);

    let short = a.holder("short").unwrap().expect("a row");
    assert_eq!((short.token, short.live), (grant.token(), true));
    // Lapses by the database clock; the row stays, not live.
    let lapsed = wait_for("the short lease to lapse", Duration::from_secs(5), || {
        a.holder("short").unwrap().filter(|row| !row.live)
    });
    assert_eq!(
        (lapsed.owner.as_str(), lapsed.token),
        (a.owner(), grant.token())
    );

    a.supersede("long").unwrap();
    assert!(a.holder("long").unwrap().unwrap().superseded);
    lease.release().unwrap();
    assert!(!a.holder("long").unwrap().unwrap().live);
}

#[test]
fn list_matches_the_prefix_literally_even_with_like_wildcards_in_keys() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let a = Leases::new(&db()).with_table(&table).unwrap();
    let b = Leases::new(&db()).with_table(&table).unwrap();
    let ttl = Duration::from_secs(30);
    let mut tokens = Vec::new();
    for (leases, key) in [
        (&a, "job%1"),
        (&a, "job_2"),
        (&b, "jobX3"),
        (&b, "other"),
        (&a, "job%%"),
    ] {
        tokens.push((key, leases.try_acquire(key, ttl).unwrap().unwrap().token()));
    }

    let keys = |prefix: &str| -> Vec<String> {
        a.list(prefix)
            .unwrap()
            .into_iter()
            .map(|row| row.key)
            .collect()
    };
    assert_eq!(keys(""), ["job%%", "job%1", "jobX3", "job_2", "other"]);
    assert_eq!(keys("job%"), ["job%%", "job%1"]);
    assert_eq!(keys("job_"), ["job_2"]);
    assert_eq!(keys("job"), ["job%%", "job%1", "jobX3", "job_2"]);
    assert!(keys("nothing").is_empty());

    for row in a.list("").unwrap() {
        let token = tokens.iter().find(|(key, _)| *key == row.key).unwrap().1;
        let owner = if ["jobX3", "other"].contains(&row.key.as_str()) {
            b.owner()
        } else {
            a.owner()
        };
        assert_eq!(
            (row.owner.as_str(), row.token, row.live),
            (owner, token, true)
        );
    }
    assert!(b.release("other").unwrap());
    let other = a.list("oth").unwrap();
    assert_eq!(other.len(), 1);
    assert!(!other[0].live, "a released lease is listed, not live");
}

#[test]
fn summary_counts_the_table_and_sends_only_the_leases_closest_to_lapsing() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    let empty = leases.summary(10).unwrap();
    assert_eq!(
        (empty.rows, empty.held, empty.superseded, empty.next_lapse),
        (0, 0, 0, None)
    );
    assert!(empty.soonest.is_empty());

    // Five held with TTLs 50 s .. 10 s, one released (a lapsed row), one superseded.
    for (i, key) in ["e", "d", "c", "b", "a"].iter().enumerate() {
        let ttl = Duration::from_secs(10 * (5 - i as u64));
        leases.try_acquire(key, ttl).unwrap().unwrap();
    }
    leases
        .try_acquire("gone", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    assert!(leases.release("gone").unwrap());
    let other = Leases::new(&db()).with_table(&table).unwrap();
    assert!(other.supersede("a").unwrap());

    let summary = leases.summary(2).unwrap();
    assert_eq!((summary.rows, summary.held, summary.superseded), (6, 5, 1));
    let keys: Vec<&str> = summary.soonest.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(
        keys,
        ["a", "b"],
        "the two closest to lapsing, soonest first"
    );
    let listed = leases.list("").unwrap();
    for lease in &summary.soonest {
        let row = listed.iter().find(|row| row.key == lease.key).unwrap();
        assert_eq!(lease, row, "the same row as list() shows");
    }
    assert_eq!(summary.next_lapse, Some(summary.soonest[0].held_until));
    assert!(summary.soonest[0].superseded);

    // None sent: the counts and the next lapse still; every one: all five in order.
    let counts = leases.summary(0).unwrap();
    assert!(counts.soonest.is_empty());
    assert_eq!(counts.held, 5);
    assert_eq!(counts.next_lapse, summary.next_lapse);
    let all = leases.summary(usize::MAX).unwrap();
    let keys: Vec<&str> = all.soonest.iter().map(|l| l.key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c", "d", "e"]);
}

/// PostgreSQL's `infinity` and `-infinity` (a row an operator wrote by hand) print as those
/// words, and its last finite time as a date, through the driver's decoding.
#[test]
fn infinite_times_print_as_infinity() {
    let row = common::client()
        .query_one(
            "SELECT 'infinity'::timestamptz, '-infinity'::timestamptz, \
                    '294276-12-31 23:59:59.999999+00'::timestamptz",
            &[],
        )
        .unwrap();
    let show = |i: usize| pgtenure::Timestamp::new(row.get::<_, SystemTime>(i)).to_string();
    assert_eq!(show(0), "infinity");
    assert_eq!(show(1), "-infinity");
    assert_eq!(show(2), "294276-12-31T23:59:59.999Z");
}

#[test]
fn force_release_ends_another_owners_managed_lease_and_its_fence() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let holder = Leases::new(&db()).with_table(&table).unwrap();
    let operator = Leases::new(&db()).with_table(&table).unwrap();
    let ttl = Duration::from_millis(900);
    let lease = holder.acquire("export", ttl).unwrap().unwrap();
    let old = lease.token();
    assert!(fence_check(&holder, "export", old));

    assert!(operator.force_release("export").unwrap());
    // The fence fails at once, before the holder's thread has noticed.
    assert!(!fence_check(&holder, "export", old));
    let row = operator.holder("export").unwrap().unwrap();
    assert_eq!(row.owner, holder.owner());
    assert!(!row.live);
    assert!(row.token > old, "a fresh token ({}) above {old}", row.token);

    let reason = lease
        .lost()
        .recv_timeout(ttl)
        .expect("the holder learns the loss at its next renewal");
    assert_eq!(reason, LeaseLoss::Refused);
    assert!(!lease.is_held());
    // Nothing live to end any more.
    assert!(!operator.force_release("export").unwrap());

    // The next acquire wins a new tenure at once, with a larger token.
    let next = operator.try_acquire("export", ttl).unwrap().unwrap();
    assert!(next.token() > row.token);
    lease.release().unwrap();
    assert_eq!(
        operator.holder("export").unwrap().unwrap().owner,
        operator.owner(),
        "the lost lease's release does not free the new tenure"
    );
}

#[test]
fn force_release_ends_a_raw_grant_and_a_missing_key_is_not_released() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let holder = Leases::new(&db()).with_table(&table).unwrap();
    let operator = Leases::new(&db()).with_table(&table).unwrap();
    let ttl = Duration::from_secs(30);
    holder.try_acquire("raw", ttl).unwrap().unwrap();
    assert!(!operator.force_release("absent").unwrap());
    assert!(operator.force_release("raw").unwrap());
    let renewal = holder.renew(&["raw"], ttl).unwrap();
    assert_eq!(renewal.get("raw"), Some(pgtenure::leases::KeyRenewal::Lost));
}

#[test]
fn a_refusal_says_whether_this_family_this_owner_or_another_owner_holds_the_key() {
    let mut tables = Tables::new();
    let table = lease_table(&mut tables);
    let a = Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("app-a")
        .unwrap();
    let a_again = Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("app-a")
        .unwrap();
    let b = Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("app-b")
        .unwrap();
    let ttl = Duration::from_secs(30);
    let lease = a.acquire_or_refusal("key", ttl).unwrap().expect("acquired");

    match a.clone().acquire_or_refusal("key", ttl).unwrap() {
        Err(Refusal::ThisFamily(Some(row))) => assert_eq!(row.token, lease.token()),
        other => panic!("expected ThisFamily, got {other:?}"),
    }
    match a_again.acquire_or_refusal("key", ttl).unwrap() {
        Err(Refusal::SameOwner(row)) => {
            assert_eq!((row.owner.as_str(), row.token), ("app-a", lease.token()))
        }
        other => panic!("expected SameOwner, got {other:?}"),
    }
    match b.acquire_or_refusal("key", ttl).unwrap() {
        Err(Refusal::OtherOwner(row)) => {
            assert_eq!(
                (row.owner.as_str(), row.token, row.live),
                ("app-a", lease.token(), true)
            )
        }
        other => panic!("expected OtherOwner, got {other:?}"),
    }
    assert!(b.try_acquire("key", ttl).unwrap().is_none());
    assert!(matches!(b.refusal("key").unwrap(), Refusal::OtherOwner(_)));

    let token = lease.token();
    lease.release().unwrap();
    match b.refusal("key").unwrap() {
        Refusal::Vacant(Some(row)) => assert_eq!((row.token, row.live), (token, false)),
        other => panic!("expected Vacant, got {other:?}"),
    }
    assert_eq!(b.refusal("never").unwrap(), Refusal::Vacant(None));
    let won = b.acquire_or_refusal("key", ttl).unwrap().expect("free now");
    assert!(won.token() > token);
    won.release().unwrap();
}

#[test]
fn bad_keys_and_prefixes_are_refused_before_any_statement() {
    // No such table: only input checks can answer without a database error.
    let leases = Leases::new(&db()).with_table("t_never_created").unwrap();
    let long = "k".repeat(1025);
    for key in ["", "  ", "a\0b", long.as_str()] {
        for result in [
            leases.holder(key).map(|_| ()),
            leases.force_release(key).map(|_| ()),
            leases.refusal(key).map(|_| ()),
        ] {
            assert_eq!(
                result.unwrap_err().kind(),
                ErrorKind::InvalidInput,
                "{key:?}"
            );
        }
    }
    for prefix in ["a\0", long.as_str()] {
        assert_eq!(
            leases.list(prefix).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
    // An empty prefix is valid: it reaches the database, which has no such table.
    let err = leases.list("").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database, "{err}");
}

#[test]
fn jobs_show_the_last_tick_its_owner_token_and_whether_it_is_busy() {
    let mut tables = Tables::new();
    let table = tables.name("tick");
    let a = TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("worker-a")
        .unwrap();
    a.create_table().unwrap();
    let b = TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("worker-b")
        .unwrap();
    assert!(a.jobs().unwrap().is_empty());
    let tick = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let rollup = a
        .claim("rollup", tick, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let report = b
        .claim("report", tick, Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let report_token = report.token();
    report.release().unwrap();

    let jobs = b.jobs().unwrap();
    assert_eq!(jobs.len(), 2);
    let (report, rollup_info) = (&jobs[0], &jobs[1]);
    assert_eq!(
        (report.job_id.as_str(), report.owner.as_str(), report.token),
        ("report", "worker-b", report_token)
    );
    assert_eq!((report.busy, report.busy_until), (false, None));
    assert_eq!(report.tick, tick);
    assert_eq!(
        (
            rollup_info.job_id.as_str(),
            rollup_info.owner.as_str(),
            rollup_info.token,
            rollup_info.busy
        ),
        ("rollup", "worker-a", rollup.token(), true)
    );
    assert!(rollup_info.busy_until.is_some());
    rollup.release().unwrap();
    assert!(!a.jobs().unwrap()[1].busy);
}

#[test]
fn leaders_list_every_fleet_live_or_not() {
    let mut tables = Tables::new();
    let table = leader_table(&mut tables);
    let elector = |name: &str, holder: &str| {
        Elector::new(&db())
            .with_table(&table)
            .unwrap()
            .with_name(name)
            .unwrap()
            .with_holder(holder)
            .unwrap()
    };
    let billing = elector("billing", "node-1");
    let search = elector("search", "node-2");
    assert!(billing.leaders().unwrap().is_empty());
    assert!(billing.is_leader().unwrap());
    assert!(search.is_leader().unwrap());
    let search_term = search.term().unwrap();
    search.resign().unwrap();
    assert!(elector("billing", "node-3").request_resign().unwrap());

    let leaders = search.leaders().unwrap();
    assert_eq!(leaders.len(), 2);
    let (b, s) = (&leaders[0], &leaders[1]);
    assert_eq!(
        (
            b.name.as_str(),
            b.holder.as_str(),
            b.term,
            b.live,
            b.resign_requested
        ),
        ("billing", "node-1", billing.term().unwrap(), true, true)
    );
    assert_eq!(
        (s.name.as_str(), s.holder.as_str(), s.term, s.live),
        ("search", "node-2", search_term, false)
    );
    let leader = billing.leader().unwrap().unwrap();
    assert_eq!((leader.name.as_str(), leader.live), ("billing", true));
    assert!(leader.resign_requested);
    assert_eq!(search.leader().unwrap(), None);
}
