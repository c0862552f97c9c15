//! Tick claims against a real PostgreSQL.

mod common;

use std::time::{Duration, SystemTime};

use common::{client, count, db, db_now, wait_for, Tables};
use pgtenure::{tick_claims::TickClaims, ErrorKind};

const MINUTE: Duration = Duration::from_secs(60);

fn claims(tables: &mut Tables) -> (TickClaims, String) {
    let table = tables.name("tick");
    let claims = TickClaims::new(&db()).with_table(&table).unwrap();
    claims.create_table().unwrap();
    (claims, table)
}

/// A tick on a round second a few minutes behind the database clock.
fn base_tick() -> SystemTime {
    let now = db_now(&mut client());
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % 60) - 5 * MINUTE
}

fn row(table: &str, job: &str) -> Option<(SystemTime, Option<SystemTime>, String, i64)> {
    client()
        .query_opt(
            &format!("SELECT tick, busy_until, owner, token FROM {table} WHERE job_id = $1"),
            &[&job],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

#[test]
fn eight_threads_claim_one_tick_and_exactly_one_wins() {
    let mut tables = Tables::new();
    let (_, table) = claims(&mut tables);
    let tick = base_tick();
    let shared = table.clone();
    let winners: Vec<(String, i64)> = common::race(8, move |i| {
        let claims = TickClaims::new(&db())
            .with_table(&shared)
            .unwrap()
            .with_owner(&format!("instance-{i}"))
            .unwrap();
        let won = claims.claim("report", tick, MINUTE).unwrap();
        won.map(|c| (claims.owner().to_owned(), c.token()))
    })
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let (owner, token) = &winners[0];
    let (stored_tick, busy, stored_owner, stored_token) = row(&table, "report").unwrap();
    assert_eq!(stored_tick, tick);
    assert!(busy.is_some());
    assert_eq!(&stored_owner, owner);
    assert_eq!((stored_token, *token), (1, 1));

    // And again for a later tick, now that the row exists (the UPDATE path), once not busy.
    client()
        .execute(&format!("UPDATE {table} SET busy_until = NULL"), &[])
        .unwrap();
    let next = tick + MINUTE;
    let shared = table.clone();
    let tokens: Vec<i64> = common::race(8, move |_| {
        let claims = TickClaims::new(&db()).with_table(&shared).unwrap();
        claims
            .claim("report", next, MINUTE)
            .unwrap()
            .map(|c| c.token())
    })
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(tokens, vec![2]);
}

#[test]
fn a_tick_not_newer_than_the_last_claimed_is_refused_even_when_idle() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let b = TickClaims::new(&db()).with_table(&table).unwrap();
    let tick = base_tick();
    let won = a
        .claim("job", tick, MINUTE)
        .unwrap()
        .expect("first claim wins");
    assert_eq!(won.token(), 1);
    assert_eq!(won.job_id(), "job");
    assert_eq!(won.tick(), tick);
    won.release().unwrap();
    // Not busy any more: only the tick rule can refuse now.
    assert!(row(&table, "job").unwrap().1.is_none());
    assert!(
        a.claim("job", tick, MINUTE).unwrap().is_none(),
        "same tick, same instance"
    );
    assert!(
        b.claim("job", tick, MINUTE).unwrap().is_none(),
        "equal tick, other instance"
    );
    assert!(
        b.claim("job", tick - Duration::from_secs(1), MINUTE)
            .unwrap()
            .is_none(),
        "older tick"
    );
    assert!(b
        .claim("job", tick - Duration::from_micros(1), MINUTE)
        .unwrap()
        .is_none());
    let later = b
        .claim("job", tick + Duration::from_micros(1), MINUTE)
        .unwrap();
    assert_eq!(later.expect("a later tick wins").token(), 2);
}

#[test]
fn a_later_tick_waits_for_release_or_for_the_busy_period_to_lapse() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let b = TickClaims::new(&db()).with_table(&table).unwrap();
    let tick = base_tick();

    let first = a.claim("job", tick, 10 * MINUTE).unwrap().unwrap();
    assert!(
        b.claim("job", tick + MINUTE, MINUTE).unwrap().is_none(),
        "busy"
    );
    first.release().unwrap();
    let second = b
        .claim("job", tick + MINUTE, Duration::from_millis(300))
        .unwrap();
    let second = second.expect("released: the later tick wins");
    assert_eq!(second.token(), 2);
    let (_, busy_until, owner, _) = row(&table, "job").unwrap();
    assert_eq!(owner, b.owner());
    let busy_until = busy_until.unwrap();

    // Not released: the next tick is refused until the database clock passes busy_until.
    assert!(a.claim("job", tick + 2 * MINUTE, MINUTE).unwrap().is_none());
    let third = wait_for("the busy period to lapse", Duration::from_secs(10), || {
        a.claim("job", tick + 2 * MINUTE, Duration::from_secs(30))
            .unwrap()
    });
    assert_eq!(third.token(), 3);
    let (_, new_busy, owner, _) = row(&table, "job").unwrap();
    assert_eq!(owner, a.owner());
    // The winning claim's now() is new busy_until minus its 30 s busy period.
    let claimed_at = new_busy.unwrap() - Duration::from_secs(30);
    assert!(
        claimed_at >= busy_until,
        "granted at {claimed_at:?} before {busy_until:?}"
    );
}

#[test]
fn a_stale_claims_release_does_not_free_a_later_claim() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let b = TickClaims::new(&db()).with_table(&table).unwrap();
    let tick = base_tick();
    let stale = a
        .claim("job", tick, Duration::from_millis(50))
        .unwrap()
        .unwrap();
    let current = wait_for("a's busy period to lapse", Duration::from_secs(10), || {
        b.claim("job", tick + MINUTE, 10 * MINUTE).unwrap()
    });
    stale.release().unwrap();
    assert!(
        row(&table, "job").unwrap().1.is_some(),
        "b's claim is still busy"
    );
    assert!(a.claim("job", tick + 2 * MINUTE, MINUTE).unwrap().is_none());
    // Same owner name but an old token cannot free it either.
    let same_owner = TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner(b.owner())
        .unwrap();
    assert!(same_owner
        .claim("job", tick + MINUTE, MINUTE)
        .unwrap()
        .is_none());
    current.release().unwrap();
    assert!(a.claim("job", tick + 2 * MINUTE, MINUTE).unwrap().is_some());
}

#[test]
fn two_jobs_are_independent() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let tick = base_tick();
    let x = a.claim("x", tick, 10 * MINUTE).unwrap();
    let y = a.claim("y", tick, 10 * MINUTE).unwrap();
    assert_eq!(x.unwrap().token(), 1);
    assert_eq!(y.unwrap().token(), 1);
    assert_eq!(count(&mut client(), &table), 2);
    assert!(a.claim("x", tick + MINUTE, MINUTE).unwrap().is_none());
}

#[test]
fn a_tick_more_than_a_minute_ahead_of_the_database_clock_is_refused_and_not_stored() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let tick = base_tick();
    let first = a.claim("job", tick, Duration::from_millis(1)).unwrap();
    assert!(first.is_some());
    let before = row(&table, "job").unwrap();

    let now = db_now(&mut client());
    let err = a.claim("job", now + 2 * MINUTE, MINUTE).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(
        err.to_string().contains("ahead of the database clock"),
        "{err}"
    );
    assert_eq!(row(&table, "job").unwrap(), before, "row unchanged");
    let err = a.claim("fresh", now + 2 * MINUTE, MINUTE).unwrap_err();
    assert!(err.is_invalid_input());
    assert!(
        row(&table, "fresh").is_none(),
        "nothing stored for a new job"
    );

    let ahead = wait_for("the busy period to lapse", Duration::from_secs(5), || {
        a.claim("job", now + Duration::from_secs(30), MINUTE)
            .unwrap()
    });
    assert_eq!(ahead.tick(), now + Duration::from_secs(30));
    assert_eq!(row(&table, "job").unwrap().0, now + Duration::from_secs(30));
}

#[test]
fn a_tick_far_behind_is_data_and_only_the_order_matters() {
    let mut tables = Tables::new();
    let (a, _) = claims(&mut tables);
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(86_400);
    assert_eq!(
        a.claim("job", old, Duration::from_millis(1))
            .unwrap()
            .unwrap()
            .token(),
        1
    );
    let err = a
        .claim(
            "job",
            SystemTime::UNIX_EPOCH - Duration::from_secs(1),
            MINUTE,
        )
        .unwrap_err();
    assert!(err.is_invalid_input());
}

#[test]
fn bad_input_is_refused_before_any_statement_and_stores_nothing() {
    let mut tables = Tables::new();
    let (a, table) = claims(&mut tables);
    let tick = base_tick();
    let long = "j".repeat(1025);
    let cases: Vec<(&str, Duration)> = vec![
        ("a\0b", MINUTE),
        ("", MINUTE),
        ("   ", MINUTE),
        (long.as_str(), MINUTE),
        ("job", Duration::ZERO),
        ("job", Duration::from_micros(999)),
        ("job", Duration::from_secs(101 * 366 * 86_400)),
    ];
    for (job, busy) in cases {
        let err = a.claim(job, tick, busy).unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::InvalidInput,
            "{job:?} {busy:?}: {err}"
        );
    }
    assert_eq!(count(&mut client(), &table), 0);
    // The longest accepted job id is stored.
    let max = "j".repeat(1024);
    assert!(a.claim(&max, tick, MINUTE).unwrap().is_some());
    // SQL-looking ids are stored verbatim.
    let sqlish = "x'); DROP TABLE y; --";
    assert!(a.claim(sqlish, tick, MINUTE).unwrap().is_some());
    assert!(row(&table, sqlish).is_some());

    let absent = tables.name("never");
    for bad in [
        "x; drop table y",
        "\"a\"",
        "a.b.c",
        &"a".repeat(64),
        &absent.replace('_', "-"),
    ] {
        let err = TickClaims::new(&db()).with_table(bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    assert!(!common::table_exists(&mut client(), &absent));
    let err = TickClaims::new(&db()).with_owner("me\0").unwrap_err();
    assert!(err.is_invalid_input());
}

#[test]
fn a_schema_qualified_table_works() {
    let mut tables = Tables::new();
    let schema = tables.name("schema");
    client()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let qualified = format!("{schema}.Ticks");
    tables.track(&format!("{schema}.\"Ticks\""));
    let a = TickClaims::new(&db()).with_table(&qualified).unwrap();
    a.create_table().unwrap();
    a.create_table().unwrap();
    assert!(a.claim("job", base_tick(), MINUTE).unwrap().is_some());
    let n = count(&mut client(), &format!("{schema}.\"Ticks\""));
    assert_eq!(n, 1, "case is kept: the table is \"Ticks\"");
    client()
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}

#[test]
fn claiming_on_a_missing_table_says_what_to_do() {
    let mut tables = Tables::new();
    let table = tables.name("missing");
    let a = TickClaims::new(&db()).with_table(&table).unwrap();
    let err = a.claim("job", base_tick(), MINUTE).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Database);
    assert_eq!(
        err.code(),
        Some(&pgtenure::postgres::error::SqlState::UNDEFINED_TABLE)
    );
    assert!(err.to_string().contains("create_table"), "{err}");
}

/// A run's writes are fenced by its claim: refused once the busy period lapsed (a run that outlived
/// it) and once a later tick was claimed.
#[test]
fn a_runs_fenced_writes_are_refused_once_its_busy_period_lapsed_or_a_later_tick_was_claimed() {
    let mut tables = Tables::new();
    let table = tables.name("ticks");
    let claims = TickClaims::new(&db()).with_table(&table).unwrap();
    claims.create_table().unwrap();
    let tick = SystemTime::now() - Duration::from_secs(10);
    let run = claims
        .claim("job", tick, Duration::from_millis(300))
        .unwrap()
        .expect("won");
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(run.fence(&mut tx).unwrap(), "its own busy period");
    tx.commit().unwrap();
    // Lapsed: a run that outlived its busy period may not write.
    wait_for("the busy period to lapse", Duration::from_secs(5), || {
        let mut tx = conn.transaction().unwrap();
        let fenced = run.fence(&mut tx).unwrap();
        tx.rollback().unwrap();
        (!fenced).then_some(())
    });
    // The same owner claims the next tick: only the token tells the two runs apart.
    let next = claims
        .claim(
            "job",
            tick + Duration::from_secs(1),
            Duration::from_secs(30),
        )
        .unwrap()
        .expect("the next tick");
    let mut tx = conn.transaction().unwrap();
    assert!(!run.fence(&mut tx).unwrap(), "a later tick was claimed");
    assert!(next.fence(&mut tx).unwrap());
    tx.commit().unwrap();
    next.release().unwrap();
}
