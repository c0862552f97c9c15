//! Connection-level correctness, each test a regression found by independent testing: a statement
//! whose answer was lost after the server committed is never reported as "not done" (invariant 9),
//! a server-ended idle session is skipped like a terminated backend, a deadline cancel never hits
//! another statement (invariant 11), and `Lease` release and drop keep their bounds end to end
//! (invariant 12).

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::proxy::{database_addr, Proxy};
use common::{client, db, wait_for, Role, Tables};
use parking_lot::Mutex;
use pgtenure::membership::{Leaser, Reconciler, Unit, UnitLoss, Units};
use pgtenure::postgres::error::SqlState;
use pgtenure::{
    elector::Elector,
    fire_claims::FireClaims,
    leases::{LeaseLoss, Leases},
    tick_claims::TickClaims,
    Db, DbBuilder,
};

/// A pool through `proxy`, with a short pool timeout.
fn proxied(proxy: &Proxy, max_size: u32) -> Db {
    let mut config = proxy.config();
    config.application_name(&proxied_app(proxy));
    DbBuilder::from_config(config)
        .max_size(max_size)
        .unwrap()
        .connection_timeout(Duration::from_secs(2))
        .unwrap()
        .build()
        .unwrap()
}

/// The application name of the sessions [`proxied`] opens (statements run as `EXECUTE`, so
/// `pg_stat_activity` shows their names, not their tables).
fn proxied_app(proxy: &Proxy) -> String {
    format!("pgtenure-proxied-{}", proxy.port())
}

/// A pool of `max_size` on the test database and a lease family on a fresh table.
fn small_pool_leases(tables: &mut Tables, max_size: u32) -> (Db, Leases) {
    let table = tables.name("lease");
    let pool_db = Db::builder(&common::url())
        .unwrap()
        .max_size(max_size)
        .unwrap()
        .build()
        .unwrap();
    let leases = Leases::new(&pool_db).with_table(&table).unwrap();
    leases.create_table().unwrap();
    (pool_db, leases)
}

#[test]
fn a_tick_claim_whose_answer_is_lost_after_commit_is_still_won() {
    let mut tables = Tables::new();
    let table = tables.name("ticks");
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let claims = TickClaims::new(&proxied(&proxy, 2))
        .with_table(&table)
        .unwrap();
    claims.create_table().unwrap();
    let tick = SystemTime::now() - Duration::from_secs(5);
    proxy.fin_after_answer("claim_id");
    let claim = claims
        .claim("job", tick, Duration::from_secs(60))
        .expect("the claim is found out, not failed")
        .expect("the committed tick is ours: it must run here");
    assert_eq!(proxy.fins(), 1, "the answer was cut off after the commit");
    let (owner, token): (String, i64) = {
        let row = client()
            .query_one(
                &format!("SELECT owner, token FROM {table} WHERE job_id = 'job'"),
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((owner.as_str(), token), (claims.owner(), claim.token()));
    // Once found out, the tick is not won again.
    assert!(claims
        .claim("job", tick, Duration::from_secs(60))
        .unwrap()
        .is_none());
}

#[test]
fn a_fire_claim_whose_answer_is_lost_after_commit_is_still_won() {
    let mut tables = Tables::new();
    let table = tables.name("fires");
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let fires = FireClaims::new(&proxied(&proxy, 2))
        .with_table(&table)
        .unwrap();
    fires.create_table().unwrap();
    proxy.fin_after_answer("claim_id");
    assert!(
        fires.claim("job@1").expect("found out"),
        "the won fire is ours"
    );
    assert_eq!(proxy.fins(), 1);
    let holder: String = client()
        .query_one(
            &format!("SELECT holder FROM {table} WHERE fire_key = 'job@1'"),
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(holder, fires.owner());
    assert!(!fires.claim("job@1").unwrap(), "won once");
}

#[test]
fn units_added_when_the_answer_is_lost_are_never_reported_as_zero() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let units = Units::new(&proxied(&proxy, 2))
        .with_tables(&procs, &units_t)
        .unwrap();
    units.create_tables().unwrap();
    let batch: Vec<Unit> = (0..10).map(|s| Unit::new("t", s).unwrap()).collect();
    proxy.fin_after_answer("unnest");
    match units.add(&batch) {
        Ok(added) => assert_eq!(added, 10),
        Err(e) => assert!(e.is_outcome_unknown(), "{e}"),
    }
    assert_eq!(proxy.fins(), 1);
    assert_eq!(common::count(&mut client(), &units_t), 10);
}

/// Records what the reconciler was told, in order.
#[derive(Default)]
struct Told(Mutex<Vec<(bool, Vec<Unit>)>>);

impl Told {
    /// The units the application works on after every message so far.
    fn working(&self) -> BTreeSet<Unit> {
        common::registry::working(self.0.lock().iter())
    }
}

impl Reconciler for Told {
    fn units_gained(&self, units: &[Unit]) {
        self.0.lock().push((true, units.to_vec()));
    }
    fn units_lost(&self, units: &[Unit], _reason: UnitLoss) {
        self.0.lock().push((false, units.to_vec()));
    }
}

#[test]
fn units_claimed_when_the_answer_is_lost_are_worked_on_after_the_next_tick() {
    let mut tables = Tables::new();
    let (procs, units_t) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db()).with_tables(&procs, &units_t).unwrap();
    units.create_tables().unwrap();
    let batch: Vec<Unit> = (0..10).map(|s| Unit::new("t", s).unwrap()).collect();
    units.add(&batch).unwrap();
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let told = Arc::new(Told::default());
    let leaser = Leaser::new(&proxied(&proxy, 2), told.clone(), common::hand_driven())
        .unwrap()
        .with_tables(&procs, &units_t)
        .unwrap();
    leaser.heartbeat().unwrap();
    proxy.fin_after_answer("claimed AS");
    let first = leaser.tick();
    assert_eq!(
        proxy.fins(),
        1,
        "the claim committed and its answer was lost"
    );
    assert!(
        first.as_ref().is_err_and(|e| e.is_outcome_unknown()),
        "{first:?}"
    );
    // The database says these ten are this live process's: the next tick must find them.
    for _ in 0..2 {
        leaser.tick().unwrap();
    }
    assert_eq!(leaser.owned().len(), 10);
    assert_eq!(told.working().len(), 10, "every owned unit is worked on");
}

#[test]
fn sessions_ended_by_an_idle_session_timeout_are_skipped_like_terminated_backends() {
    let mut tables = Tables::new();
    let role = Role::new(&mut tables, "read committed");
    client()
        .batch_execute(&format!(
            "ALTER ROLE {} SET idle_session_timeout = '1s'; GRANT ALL ON SCHEMA public TO {0}",
            role.name
        ))
        .unwrap();
    let app = tables.name("idle");
    let db = DbBuilder::from_config(role.config(&app))
        .max_size(4)
        .unwrap()
        .build()
        .unwrap();
    let (ticks_t, fires_t, leader_t) = (
        tables.name("ticks"),
        tables.name("fires"),
        tables.name("leader"),
    );
    let ticks = TickClaims::new(&db).with_table(&ticks_t).unwrap();
    let fires = FireClaims::new(&db).with_table(&fires_t).unwrap();
    let elector = Elector::new(&db).with_table(&leader_t).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    elector.create_table().unwrap();
    let base = SystemTime::now() - Duration::from_secs(60);
    let mut n = 0;
    for round in 0..2 {
        // Open several connections at once, so the pool holds more than one to lose.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| elector.leader().unwrap());
            }
        });
        // Wait until the server has ended every one of them for idling.
        let mut admin = client();
        wait_for("the idle sessions to end", Duration::from_secs(10), || {
            let left: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    &[&app],
                )
                .unwrap()
                .get(0);
            (left == 0).then_some(())
        });
        for i in 0..4 {
            n += 1;
            let tick = base + Duration::from_secs(n);
            let claim = ticks.claim("job", tick, Duration::from_millis(1)).unwrap();
            // Released at once: the next claim may come within the 1 ms busy period.
            claim
                .unwrap_or_else(|| panic!("round {round}, claim {i} refused"))
                .release()
                .unwrap();
            assert!(fires.claim(&format!("job@{n}")).unwrap());
            assert!(elector.is_leader().unwrap());
        }
    }
}

#[test]
fn a_deadline_cancel_never_lands_on_the_next_statement_of_its_connection() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    // One connection: whatever runs after the renewal runs on the renewal's connection.
    let holder_db = proxied(&proxy, 1);
    let leases = Leases::new(&holder_db).with_table(&table).unwrap();
    let ttl = Duration::from_millis(300);
    let lease = leases.acquire("k", ttl).unwrap().unwrap();
    // Block the next renewal on the row lock, and make the watcher's cancel arrive late.
    let mut blocker = client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!("SELECT 1 FROM {table} WHERE key = 'k' FOR UPDATE"),
        &[],
    )
    .unwrap();
    proxy.set_connect_delay(Duration::from_millis(400));
    assert_eq!(
        lease.lost().recv_timeout(Duration::from_secs(3)),
        Ok(LeaseLoss::Expired)
    );
    // The renewal now finishes before the cancel lands.
    tx.commit().unwrap();
    let started = Instant::now();
    let mut conn = holder_db.connection().unwrap();
    let slept = conn.execute("SELECT pg_sleep(1)", &[]);
    assert!(
        slept.is_ok(),
        "the application's own statement was cancelled: {slept:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));
    drop(conn);
    drop(lease);
    proxy.set_connect_delay(Duration::ZERO);
}

#[test]
fn dropping_a_lease_while_the_application_holds_every_connection_keeps_its_bound() {
    let mut tables = Tables::new();
    // A pool of the application's own, which it can exhaust (`Db::connection` keeps one back).
    let pool = pgtenure::r2d2::Pool::builder()
        .max_size(2)
        .test_on_check_out(false)
        .build(pgtenure::r2d2_postgres::PostgresConnectionManager::new(
            common::url_config(),
            pgtenure::postgres::NoTls,
        ))
        .unwrap();
    let leases = Leases::new(&Db::from_pool(pool.clone()))
        .with_table(&tables.name("lease"))
        .unwrap();
    leases.create_table().unwrap();
    // Short enough that the row lapses while the release waits for a connection.
    let lease = leases
        .acquire("k", Duration::from_secs(2))
        .unwrap()
        .unwrap();
    let held = (pool.get().unwrap(), pool.get().unwrap());
    let started = Instant::now();
    let result = lease.release();
    let took = started.elapsed();
    println!("release with the pool exhausted: {took:?}, {result:?}");
    assert!(result.is_err(), "no connection could be had");
    assert!(took <= Duration::from_millis(5_500), "{took:?}");
    drop(held);
    // The release gave up and completed: the family holds the key no more, and the row has lapsed.
    let again = leases.acquire("k", Duration::from_secs(30)).unwrap();
    assert!(again.is_some(), "the family acquires its key again");
}

#[test]
fn dropping_many_leases_while_the_database_refuses_connections_costs_one_bound() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let holder_db = DbBuilder::from_config(proxy.config())
        .max_size(2)
        .unwrap()
        .build()
        .unwrap();
    let leases = Leases::new(&holder_db).with_table(&table).unwrap();
    let held: Vec<_> = (0..4)
        .map(|i| {
            leases
                .acquire(&format!("k{i}"), Duration::from_secs(30))
                .unwrap()
                .unwrap()
        })
        .collect();
    // The database goes away: every connection is cut and new ones are refused.
    drop(proxy);
    let started = Instant::now();
    for lease in held {
        drop(lease);
    }
    let took = started.elapsed();
    println!("four leases dropped while the database refuses connections: {took:?}");
    assert!(took <= Duration::from_millis(6_000), "{took:?}");
}

#[test]
fn an_acquire_after_a_long_pool_wait_gets_its_whole_ttl() {
    let mut tables = Tables::new();
    let (pool_db, leases) = small_pool_leases(&mut tables, 1);
    let conn = pool_db.connection().unwrap();
    // The margins are shares of the TTL: the pool is held for half of it, and the statement after
    // the wait may take a quarter (a pool wait counted against the lease would leave at most half).
    let ttl = Duration::from_secs(2);
    // A raw grant: its deadline is what the acquire computed (no renewal moves it).
    let acquirer = {
        let leases = leases.clone();
        thread::spawn(move || {
            let grant = leases.try_acquire("k", ttl).unwrap().unwrap();
            (Instant::now(), grant)
        })
    };
    // Real time is the subject: the acquire waits half the TTL for the pool.
    thread::sleep(ttl / 2);
    drop(conn);
    let (returned, grant) = acquirer.join().unwrap();
    let left = grant.deadline().saturating_duration_since(returned);
    assert!(
        left >= ttl - ttl / 4,
        "the pool wait ate into the lease: {left:?} of {ttl:?} left"
    );
}

#[test]
fn a_statement_refused_by_the_server_is_not_an_unknown_outcome() {
    let mut tables = Tables::new();
    let ticks = TickClaims::new(&db())
        .with_table(&tables.name("missing"))
        .unwrap();
    let err = ticks
        .claim("job", SystemTime::now(), Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::UNDEFINED_TABLE));
    assert!(!err.is_outcome_unknown(), "{err}");
}

#[test]
fn a_renewal_sent_again_while_the_first_waits_on_a_lock_never_shortens_the_lease() {
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let leases = Leases::new(&proxied(&proxy, 4)).with_table(&table).unwrap();
    let mut admin = client();
    let app = proxied_app(&proxy);
    let waiting = |admin: &mut pgtenure::postgres::Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND application_name = $1",
                &[&app],
            )
            .unwrap()
            .get(0)
    };
    for trial in 0..4 {
        let ttl = Duration::from_secs(3);
        let lease = leases.acquire("k", ttl).unwrap().unwrap();
        // A fenced transaction holds the row: the next renewal waits for it.
        let mut blocker = client();
        let mut tx = blocker.transaction().unwrap();
        tx.execute(
            &format!("SELECT 1 FROM {table} WHERE key = 'k' FOR SHARE"),
            &[],
        )
        .unwrap();
        wait_for(
            "a renewal waiting on the lock",
            Duration::from_secs(5),
            || (waiting(&mut admin) == 1).then_some(()),
        );
        // Its connection dies: the outcome is unknown, so it is sent again and waits too, while the
        // first attempt (its transaction begun 300 ms earlier) still waits on the server.
        let before = lease.deadline();
        // Real time is the subject: the first attempt's transaction ages 300 ms before the cut.
        thread::sleep(Duration::from_millis(300));
        proxy.cut();
        wait_for("the renewal sent again", Duration::from_secs(5), || {
            (waiting(&mut admin) == 2).then_some(())
        });
        tx.commit().unwrap();
        wait_for("both renewals to commit", Duration::from_secs(5), || {
            (waiting(&mut admin) == 0).then_some(())
        });
        // Once the lease took in the answer, compare what the database grants with what it believes.
        wait_for("the renewal's answer", Duration::from_secs(5), || {
            (lease.deadline() > before).then_some(())
        });
        let local = lease.deadline().saturating_duration_since(Instant::now());
        let remote: f64 = admin
            .query_one(
                &format!("SELECT extract(epoch FROM held_until - now())::float8 FROM {table}"),
                &[],
            )
            .unwrap()
            .get(0);
        let remote = Duration::from_secs_f64(remote.max(0.0));
        assert!(
            remote + Duration::from_millis(20) >= local,
            "trial {trial}: the database holds the lease {remote:?} more, the lease believes {local:?}"
        );
        lease.release().unwrap();
    }
}
