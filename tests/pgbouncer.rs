//! The operations through PgBouncer in transaction pooling mode, with the harness's `PgBouncer`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use common::{client, Names, Tables};
use pgtenure::postgres::{self, NoTls};
use pgtenure::testing::PgBouncer;
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, semaphores::Semaphore,
    tick_claims::TickClaims, Db, StatementMode, StatementModes,
};

#[test]
fn every_primitive_works_through_pgbouncer_in_transaction_mode() {
    let bouncer = PgBouncer::start(&common::url()).unwrap();
    // Db::connect sends the READ COMMITTED option; this PgBouncer ignores `options`.
    let db = Db::connect(bouncer.url()).unwrap();
    let mut tables = Tables::new();
    let Names {
        tick: tick_t,
        fire: fire_t,
        lease: lease_t,
        leader: leader_t,
        ..
    } = tables.every_primitive();
    let ticks = TickClaims::new(&db).with_table(&tick_t).unwrap();
    let fires = FireClaims::new(&db).with_table(&fire_t).unwrap();
    let leases = Leases::new(&db).with_table(&lease_t).unwrap();
    let elector = Elector::new(&db).with_table(&leader_t).unwrap();
    ticks.create_table().unwrap();
    fires.create_table().unwrap();
    leases.create_table().unwrap();
    elector.create_table().unwrap();
    // Many operations from many threads over few server connections: no named statement to collide.
    let t = (tick_t.clone(), lease_t.clone(), bouncer.url().to_owned());
    let results = common::race(8, move |i| {
        let db = Db::connect(&t.2).unwrap();
        let ticks = TickClaims::new(&db).with_table(&t.0).unwrap();
        let leases = Leases::new(&db).with_table(&t.1).unwrap();
        let mut won = Vec::new();
        for n in 0..50 {
            let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
            if let Some(claim) = ticks.claim("job", tick, Duration::from_secs(60)).unwrap() {
                claim.release().unwrap();
                won.push(n);
            }
            if let Some(lease) = leases
                .acquire(
                    &format!("k{}", (i + n as usize) % 3),
                    Duration::from_millis(300),
                )
                .unwrap()
            {
                lease.release().unwrap();
            }
        }
        won
    });
    // At most once each: a tick refused while the previous one is busy is skipped by design.
    let mut won: Vec<u64> = results.into_iter().flatten().collect();
    let wins = won.len();
    won.sort_unstable();
    won.dedup();
    assert_eq!(won.len(), wins, "a tick was won twice");
    assert!(wins >= 10, "only {wins} of 50 ticks won");
    assert!(fires.claim("f@1").unwrap());
    assert!(!fires.claim("f@1").unwrap());
    assert!(elector.is_leader().unwrap());
    assert!(elector.leader().unwrap().is_some());
    elector.resign().unwrap();
    // A semaphore's permits: granted up to N, the next refused, fenced, released.
    let sema_t = tables.name("sema");
    let sem = Semaphore::new(&db).with_table(&sema_t).unwrap();
    sem.create_table().unwrap();
    let ttl = Duration::from_secs(30);
    let permits: Vec<_> = (0..2)
        .map(|_| sem.acquire("s", 2, ttl).unwrap().unwrap())
        .collect();
    assert!(sem.acquire("s", 2, ttl).unwrap().is_none());
    let mut conn = db.connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(permits[1].fence(&mut tx).unwrap());
    tx.commit().unwrap();
    drop(conn);
    assert_eq!(sem.holders("s").unwrap().len(), 2);
    for permit in permits {
        permit.release().unwrap();
    }
    assert!(sem.holders("s").unwrap().is_empty());
    assert_eq!(common::count(&mut client(), &tick_t), 1);
    let token: i64 = client()
        .query_one(&format!("SELECT token FROM {tick_t}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(token as usize, wins, "one token per win");
}

#[test]
fn prepared_statements_behind_pgbouncer_with_few_server_connections_never_fail_or_mix_up() {
    // Auto finds no proof behind the pooler: SQL-level statements, and nothing to find.
    for modes in few_server_connections(StatementMode::Auto) {
        assert_eq!(
            (modes.protocol, modes.pooler_found),
            (0, false),
            "Auto proved a connection through PgBouncer direct: {modes}"
        );
        assert!(modes.sql >= 1, "{modes}");
    }
}

#[test]
fn protocol_level_statements_forced_through_pgbouncer_find_the_pooler_before_anything_mixes_up() {
    // Protocol skips the proof: the first statement missing on another backend proves the pooler,
    // and every Db goes on with SQL-level statements; every operation still returns what it must.
    // A Db whose connection first finds its statements wiped three calls in a row on its own
    // backend (the chaos client's DEALLOCATE ALL) sends unprepared there instead, which is as safe.
    for modes in few_server_connections(StatementMode::Protocol) {
        assert!(modes.pooler_found || modes.vanishing_found, "{modes}");
        assert!(modes.protocol >= 1, "{modes}");
    }
}

/// Six clients in `mode`, each with a pool of three, through a PgBouncer with two server
/// connections, beside a client that wipes prepared statements and one that uses the protocol's
/// own: every operation returns what it must. Returns each client `Db`'s statement modes.
fn few_server_connections(mode: StatementMode) -> Vec<StatementModes> {
    // Eighteen client connections over two server connections: a client's consecutive statements
    // land on either, whichever is free. A chaos client wipes the prepared statements of whichever
    // server connection it lands on, and a neighbour uses the driver's protocol-level statements
    // (named s0, s1, ... in every process) the way PgBouncer 1.18 cannot keep apart.
    let bouncer = PgBouncer::start_with_pool_size(&common::direct_url(), 2).unwrap();
    let mut tables = Tables::new();
    let Names {
        tick: tick_t,
        fire: fire_t,
        lease: lease_t,
        leader: leader_t,
        ..
    } = tables.every_primitive();
    let setup = Db::connect(bouncer.url()).unwrap();
    TickClaims::new(&setup)
        .with_table(&tick_t)
        .unwrap()
        .create_table()
        .unwrap();
    FireClaims::new(&setup)
        .with_table(&fire_t)
        .unwrap()
        .create_table()
        .unwrap();
    Leases::new(&setup)
        .with_table(&lease_t)
        .unwrap()
        .create_table()
        .unwrap();
    Elector::new(&setup)
        .with_table(&leader_t)
        .unwrap()
        .create_table()
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let wiped = Arc::new(AtomicU64::new(0));
    let chaos = {
        let (url, stop, wiped) = (bouncer.url().to_owned(), stop.clone(), wiped.clone());
        thread::spawn(move || {
            let mut raw = postgres::Client::connect(&url, NoTls).unwrap();
            while !stop.load(Ordering::SeqCst) {
                raw.batch_execute("DEALLOCATE ALL").unwrap();
                wiped.fetch_add(1, Ordering::SeqCst);
                // Real time is the subject: a wipe every 2 ms while the others run.
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let neighbour = {
        let (url, stop) = (bouncer.url().to_owned(), stop.clone());
        thread::spawn(move || {
            let mut raw = postgres::Client::connect(&url, NoTls).unwrap();
            while !stop.load(Ordering::SeqCst) {
                // Fails often ("prepared statement ... does not exist" or "already exists"), and
                // can bind another client's s0: its own problem, never pgtenure's.
                let _ = raw.query("SELECT $1::int8 + 1", &[&1_i64]);
                // Real time is the subject: a neighbour's statement every millisecond.
                thread::sleep(Duration::from_millis(1));
            }
        })
    };

    let names = (
        tick_t.clone(),
        fire_t.clone(),
        lease_t.clone(),
        leader_t.clone(),
    );
    let url = bouncer.url().to_owned();
    let ops = common::race(6, move |i| {
        let db = Db::builder(&url)
            .unwrap()
            .max_size(3)
            .unwrap()
            .statement_mode(mode)
            .build()
            .unwrap()
            .with_cancel_on_deadline(false);
        let ticks = TickClaims::new(&db).with_table(&names.0).unwrap();
        let fires = FireClaims::new(&db).with_table(&names.1).unwrap();
        let leases = Leases::new(&db).with_table(&names.2).unwrap();
        let elector = Elector::new(&db)
            .with_table(&names.3)
            .unwrap()
            .with_name(&format!("fleet{i}"))
            .unwrap();
        let job = format!("job{i}");
        let (mut ops, mut last_token) = (0_u64, 0_i64);
        for n in 0..60_u64 {
            let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n);
            let claim = ticks
                .claim(&job, tick, Duration::from_secs(60))
                .unwrap()
                .expect("a later tick of a released job is won");
            assert_eq!(claim.token(), n as i64 + 1, "{job} tick {n}");
            assert!(ticks
                .claim(&job, tick, Duration::from_secs(60))
                .unwrap()
                .is_none());
            claim.release().unwrap();
            let fire = format!("{job}@{n}");
            assert!(fires.claim(&fire).unwrap());
            assert!(!fires.claim(&fire).unwrap());
            let key = format!("{job}-key");
            let grant = leases
                .try_acquire(&key, Duration::from_secs(60))
                .unwrap()
                .expect("a released key is free");
            assert!(grant.token() > last_token, "{key}: tokens only grow");
            last_token = grant.token();
            let renewed = leases
                .renew(&[key.as_str()], Duration::from_secs(60))
                .unwrap();
            assert_eq!(renewed.held().collect::<Vec<_>>(), [key.as_str()]);
            assert!(leases.release(&key).unwrap());
            assert!(elector.is_leader().unwrap());
            let term = elector.term().expect("leading");
            let leader = elector.leader().unwrap().expect("led");
            assert_eq!(
                (leader.holder.as_str(), leader.term),
                (elector.holder(), term)
            );
            elector.resign().unwrap();
            ops += 10;
        }
        (ops, db.statement_modes())
    });
    let (ops, modes): (Vec<u64>, Vec<StatementModes>) = ops.into_iter().unzip();
    stop.store(true, Ordering::SeqCst);
    chaos.join().unwrap();
    neighbour.join().unwrap();
    let ops: u64 = ops.iter().sum();
    let wiped = wiped.load(Ordering::SeqCst);
    println!("{ops} operations, none failed, while {wiped} DEALLOCATE ALL ran on shared server connections");
    assert_eq!(ops, 6 * 60 * 10);
    assert!(wiped >= 50, "the chaos client ran only {wiped} times");
    // Every tick token once per job, in order: nothing ran twice or in place of another.
    let tokens: i64 = client()
        .query_one(&format!("SELECT sum(token)::int8 FROM {tick_t}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(tokens, 6 * 60);
    assert_eq!(common::count(&mut client(), &fire_t), 6 * 60);
    modes
}

#[test]
fn auto_does_not_prove_a_pooler_listed_before_the_server_it_forwards_to() {
    // A "pooler, else the database" list: the pooler answers, and the server behind it reports its
    // own address and port, which the list names too. Only the host the driver tries first may
    // prove a connection direct.
    let server: postgres::Config = common::direct_url().parse().unwrap();
    let host = match server.get_hosts().first() {
        Some(postgres::config::Host::Tcp(host)) => host.clone(),
        other => panic!("a TCP server is needed, not {other:?}"),
    };
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let (user, dbname) = (server.get_user().unwrap(), server.get_dbname().unwrap());
    let bouncer = PgBouncer::start(&common::direct_url()).unwrap();
    let mut tables = Tables::new();
    let Names { tick: tick_t, .. } = tables.every_primitive();
    let modes = |hosts: String, ports: String| {
        let db = Db::connect(&format!(
            "host={hosts} port={ports} user={user} dbname={dbname}"
        ))
        .unwrap();
        let ticks = TickClaims::new(&db).with_table(&tick_t).unwrap();
        ticks.create_table().unwrap();
        ticks.jobs().unwrap();
        db.statement_modes()
    };
    let pooler_first = modes(
        format!("127.0.0.1,{host}"),
        format!("{},{port}", bouncer.port()),
    );
    // One connection or two: the pool keeps one idle beside the one in use, and which of them
    // the next operation gets (and so how many ran a statement) is up to timing.
    assert!(
        pooler_first.protocol == 0 && pooler_first.sql >= 1,
        "a connection through the pooler listed first was proven direct: {pooler_first}"
    );
    // The server first: the driver reaches it, and the proof holds.
    let server_first = modes(
        format!("{host},127.0.0.1"),
        format!("{port},{}", bouncer.port()),
    );
    assert!(
        server_first.protocol >= 1 && server_first.sql == 0,
        "{server_first}"
    );
}

/// Twelve processes connecting through PgBouncer (transaction mode, few server connections) at
/// once, in every mode safe behind it: nothing is prepared under a driver-chosen name, the connect
/// probe included (issue 32: 28 "prepared statement sN already exists" and a server connection left
/// with `s0` = the probe), and no server connection holds such a statement afterwards.
#[test]
fn many_processes_connecting_at_once_through_pgbouncer_prepare_nothing_under_driver_names() {
    let bouncer = PgBouncer::start_with_pool_size(&common::direct_url(), 2).unwrap();
    let bouncer_addr: std::net::SocketAddr =
        format!("127.0.0.1:{}", bouncer.port()).parse().unwrap();
    for mode in [
        StatementMode::Auto,
        StatementMode::Sql,
        StatementMode::Unprepared,
    ] {
        let proxy = common::proxy::Proxy::start(0, bouncer_addr).unwrap();
        let port = proxy.port();
        let dbs: Vec<Db> = common::race(12, move |_| {
            let config = common::config_at("127.0.0.1", port);
            let db = pgtenure::DbBuilder::from_config(config)
                .statement_mode(mode)
                .max_size(1)
                .and_then(|b| b.build())
                .unwrap_or_else(|e| panic!("{mode}: {e}"));
            let fires = FireClaims::new(&db);
            // Any statement on the connection (the fire claims table need not exist).
            let _ = fires.claim("probe@1");
            db
        });
        assert_eq!(
            proxy.driver_named_statements(),
            0,
            "{mode}: a statement was prepared under a driver-chosen name"
        );
        let named: Vec<i64> = (0..20)
            .map(|_| {
                let mut c = postgres::Client::connect(bouncer.url(), NoTls).unwrap();
                let rows = c
                    .simple_query(
                        "SELECT count(*) FROM pg_prepared_statements WHERE name ~ '^s[0-9]+$'",
                    )
                    .unwrap();
                rows.iter()
                    .find_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => {
                            r.get(0).map(|v| v.parse().unwrap())
                        }
                        _ => None,
                    })
                    .unwrap_or(0)
            })
            .collect();
        assert!(
            named.iter().all(|n| *n == 0),
            "{mode}: server connections hold driver-named statements: {named:?}"
        );
        drop(dbs);
    }
}

/// Handover notifications through PgBouncer in transaction mode: the listener's connection is not
/// proven direct, so it never listens (a pooler loses `LISTEN`) and a waiting acquire is granted
/// by polling, as without notifications; the release's `NOTIFY` goes through the pooler and wakes
/// a waiter whose own connection is direct.
#[test]
fn handover_notifications_through_pgbouncer_poll_and_still_notify() {
    let bouncer = PgBouncer::start(&common::direct_url()).unwrap();
    let mut tables = Tables::new();
    let table = common::lease_table(&mut tables);
    let pooled = Db::builder(bouncer.url())
        .unwrap()
        .handover_notifications(true)
        .build()
        .unwrap();
    let direct = Db::builder(&common::direct_url())
        .unwrap()
        .handover_notifications(true)
        .build()
        .unwrap();
    let leases = |db: &Db, owner: &str| {
        Leases::new(db)
            .with_table(&table)
            .and_then(|l| l.with_owner(owner))
            .and_then(|l| l.with_retry_period(Duration::from_millis(300)))
            .unwrap()
    };
    let (through, beside) = (leases(&pooled, "pooled"), leases(&direct, "direct"));
    let woken = beside.watch_released("k").unwrap();
    let held = through
        .acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    common::wait_for("the direct listener", Duration::from_secs(5), || {
        direct.handover_listening().then_some(())
    });
    while woken.receiver().try_recv().is_ok() {}
    held.release().unwrap();
    woken
        .receiver()
        .recv_timeout(Duration::from_secs(2))
        .expect("the release through PgBouncer woke no direct waiter");
    // The other way: the waiter behind the pooler polls.
    let held = beside
        .acquire("k", Duration::from_secs(60))
        .unwrap()
        .unwrap();
    let waiting = {
        let through = through.clone();
        thread::spawn(move || {
            through.acquire_waiting("k", Duration::from_secs(60), Duration::from_secs(10))
        })
    };
    held.release().unwrap();
    let lease = waiting
        .join()
        .unwrap()
        .unwrap()
        .expect("granted by polling");
    assert!(!pooled.handover_listening(), "a listener behind PgBouncer");
    assert_eq!(through.holder("k").unwrap().unwrap().owner, "pooled");
    lease.release().unwrap();
}
