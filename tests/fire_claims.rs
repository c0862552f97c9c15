//! Fire claims against a real PostgreSQL.

mod common;

use std::time::{Duration, SystemTime};

use common::{client, count, db, wait_for, Tables};
use pgtenure::{fire_claims::FireClaims, ErrorKind};

fn fires(tables: &mut Tables, ttl: Duration) -> (FireClaims, String) {
    let table = tables.name("fire");
    let fires = FireClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    fires.create_table().unwrap();
    (fires, table)
}

fn row(table: &str, key: &str) -> Option<(String, SystemTime, SystemTime)> {
    client()
        .query_opt(
            &format!("SELECT holder, claimed_at, expires_at FROM {table} WHERE fire_key = $1"),
            &[&key],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

#[test]
fn eight_threads_claim_one_key_and_exactly_one_wins() {
    let mut tables = Tables::new();
    let (_, table) = fires(&mut tables, Duration::from_secs(600));
    let shared = table.clone();
    let winners: Vec<String> = common::race(8, move |i| {
        let fires = FireClaims::new(&db())
            .with_table(&shared)
            .unwrap()
            .with_owner(&format!("instance-{i}"))
            .unwrap();
        let won = fires.claim("digest@1800000000000000000").unwrap();
        won.then(|| fires.owner().to_owned())
    })
    .into_iter()
    .flatten()
    .collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    let (holder, claimed_at, expires_at) = row(&table, "digest@1800000000000000000").unwrap();
    assert_eq!(holder, winners[0]);
    assert_eq!(
        expires_at.duration_since(claimed_at).unwrap(),
        Duration::from_secs(600)
    );
}

#[test]
fn eight_threads_race_for_an_expired_claim_and_exactly_one_replaces_it() {
    let mut tables = Tables::new();
    let (first, table) = fires(&mut tables, Duration::from_millis(20));
    assert!(first.claim("k@1").unwrap());
    let lapsed = || {
        let mut c = client();
        let expired: bool = c
            .query_one(&format!("SELECT expires_at <= now() FROM {table}"), &[])
            .unwrap()
            .get(0);
        expired.then_some(())
    };
    wait_for("the claim to expire", Duration::from_secs(5), lapsed);
    let shared = table.clone();
    let won = common::race(8, move |_| {
        let fires = FireClaims::new(&db()).with_table(&shared).unwrap();
        fires.claim("k@1").unwrap()
    });
    let won = won.into_iter().filter(|w| *w).count();
    assert_eq!(won, 1);
    assert_eq!(count(&mut client(), &table), 1);
}

#[test]
fn after_the_ttl_lapses_another_claimer_wins() {
    let mut tables = Tables::new();
    let (a, table) = fires(&mut tables, Duration::from_millis(300));
    let b = FireClaims::new(&db()).with_table(&table).unwrap();
    assert!(a.claim("job@42").unwrap());
    let (_, _, a_expires) = row(&table, "job@42").unwrap();
    assert!(!b.claim("job@42").unwrap(), "live claim");
    wait_for("a's claim to lapse", Duration::from_secs(10), || {
        b.claim("job@42").unwrap().then_some(())
    });
    let (holder, claimed_at, expires_at) = row(&table, "job@42").unwrap();
    assert_eq!(holder, b.owner());
    assert!(
        claimed_at >= a_expires,
        "replaced at {claimed_at:?} before expiry {a_expires:?}"
    );
    assert_eq!(expires_at.duration_since(claimed_at).unwrap(), b.ttl());
    assert_eq!(b.ttl(), pgtenure::fire_claims::DEFAULT_TTL);
}

#[test]
fn the_same_claimer_reclaiming_a_live_key_gets_false() {
    let mut tables = Tables::new();
    let (a, table) = fires(&mut tables, Duration::from_secs(60));
    assert!(a.claim("job@1").unwrap());
    let before = row(&table, "job@1").unwrap();
    assert!(!a.claim("job@1").unwrap());
    assert_eq!(
        row(&table, "job@1").unwrap(),
        before,
        "a refused claim changes nothing"
    );
    assert!(
        a.claim("job@2").unwrap(),
        "another fire key is another claim"
    );
}

#[test]
fn purge_deletes_only_long_expired_claims() {
    let mut tables = Tables::new();
    let (a, table) = fires(&mut tables, Duration::from_secs(60));
    let mut c = client();
    c.batch_execute(&format!(
        "INSERT INTO {table} (fire_key, holder, claimed_at, expires_at) VALUES
            ('old@1', 'h', now() - interval '3 hours', now() - interval '2 hours'),
            ('recent@1', 'h', now() - interval '2 minutes', now() - interval '30 seconds'),
            ('live@1', 'h', now(), now() + interval '1 hour')"
    ))
    .unwrap();
    assert_eq!(a.purge(Duration::from_secs(60)).unwrap(), 1);
    assert!(row(&table, "old@1").is_none());
    assert!(row(&table, "recent@1").is_some(), "inside the buffer");
    assert_eq!(a.purge(Duration::from_secs(60)).unwrap(), 0);
    assert_eq!(a.purge(Duration::ZERO).unwrap(), 1);
    assert!(
        row(&table, "live@1").is_some(),
        "a live claim is never purged"
    );
    assert_eq!(count(&mut c, &table), 1);
    let err = a
        .purge(Duration::from_secs(101 * 366 * 86_400))
        .unwrap_err();
    assert!(err.is_invalid_input());
}

#[test]
fn bad_input_is_refused_before_any_statement_and_stores_nothing() {
    let mut tables = Tables::new();
    let (a, table) = fires(&mut tables, Duration::from_secs(60));
    let long = "k".repeat(1025);
    for key in ["", " ", "\t", "a\0b", long.as_str()] {
        let err = a.claim(key).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{key:?}");
    }
    assert_eq!(count(&mut client(), &table), 0);
    for ttl in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_secs(101 * 366 * 86_400),
    ] {
        let err = FireClaims::new(&db()).with_ttl(ttl).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{ttl:?}");
    }
    for bad in ["x; drop table y", "\"a\"", "a.b.c", &"f".repeat(64)] {
        assert!(
            FireClaims::new(&db())
                .with_table(bad)
                .unwrap_err()
                .is_invalid_input(),
            "{bad:?}"
        );
    }
    assert!(FireClaims::new(&db())
        .with_owner("  ")
        .unwrap_err()
        .is_invalid_input());
    // A sub-second TTL is kept exactly.
    let short = FireClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .with_ttl(Duration::from_micros(1_234_567))
        .unwrap();
    assert!(short.claim("exact@1").unwrap());
    let (_, claimed_at, expires_at) = row(&table, "exact@1").unwrap();
    assert_eq!(
        expires_at.duration_since(claimed_at).unwrap(),
        Duration::from_micros(1_234_567)
    );
}

#[test]
fn a_schema_qualified_table_works() {
    let mut tables = Tables::new();
    let schema = tables.name("schema");
    client()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let a = FireClaims::new(&db())
        .with_table(&format!("{schema}.fires"))
        .unwrap();
    a.create_table().unwrap();
    assert!(a.claim("job@1").unwrap());
    assert_eq!(a.purge(Duration::ZERO).unwrap(), 0);
    assert_eq!(count(&mut client(), &format!("{schema}.fires")), 1);
    let index: bool = client()
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("{schema}.fires_expires_at")],
        )
        .unwrap()
        .get(0);
    assert!(index, "the purge index lives in the table's schema");
    client()
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}
