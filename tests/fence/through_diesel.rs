//! Fences through Diesel (feature `diesel`: `cargo test --features diesel --test fence`), on a real
//! server: a stale holder's Diesel write is refused, a takeover waits for the holder's Diesel
//! transaction, and a failing fence says why.

use std::error::Error as StdError;
use std::time::Duration;

use crate::common::{client, db, direct_url, wait_for, Tables};
use pgtenure::crossbeam_channel::{bounded, TryRecvError};
use pgtenure::diesel::sql_types::{BigInt, Integer};
use pgtenure::diesel::{Connection, PgConnection, RunQueryDsl};
use pgtenure::leases::Leases;
use pgtenure::{diesel, ErrorKind};

type BoxError = Box<dyn StdError + Send + Sync>;

const MINUTE: Duration = Duration::from_secs(60);

fn diesel_conn() -> PgConnection {
    PgConnection::establish(&direct_url()).unwrap()
}

fn family(table: &str, owner: &str) -> Leases {
    Leases::new(&db())
        .with_table(table)
        .unwrap()
        .with_owner(owner)
        .unwrap()
}

/// A table for the protected writes: the token of each write.
fn exports_table(tables: &mut Tables) -> String {
    let exports = tables.name("exports");
    client()
        .batch_execute(&format!("CREATE TABLE {exports} (token bigint NOT NULL)"))
        .unwrap();
    exports
}

fn written(exports: &str) -> Vec<i64> {
    client()
        .query(&format!("SELECT token FROM {exports} ORDER BY token"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The protected write, through Diesel.
fn write(conn: &mut PgConnection, exports: &str, token: i64) -> Result<(), BoxError> {
    diesel::sql_query(format!("INSERT INTO {exports} (token) VALUES ($1)"))
        .bind::<BigInt, _>(token)
        .execute(conn)?;
    Ok(())
}

#[test]
fn a_stale_holders_diesel_write_is_refused_and_a_live_holders_goes_through() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let exports = exports_table(&mut tables);
    let (a, b) = (family(&table, "a"), family(&table, "b"));
    a.create_table().unwrap();
    let lease = a.acquire("k", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    let mut conn = diesel_conn();

    let fenced_write = |conn: &mut PgConnection| {
        conn.transaction(|conn| {
            if !fence.check_diesel(conn)? {
                return Ok(false);
            }
            write(conn, &exports, lease.token())?;
            Ok::<_, BoxError>(true)
        })
        .unwrap()
    };
    assert!(fenced_write(&mut conn), "held: the write goes through");
    assert_eq!(written(&exports), [lease.token()]);

    // A takeover: an operator ends a's tenure and b acquires.
    assert!(b.force_release("k").unwrap());
    let taken = b.try_acquire("k", MINUTE).unwrap().unwrap();
    assert!(taken.token() > lease.token());
    assert!(!fenced_write(&mut conn), "stale: the fence refuses");
    assert_eq!(
        written(&exports),
        [lease.token()],
        "and nothing was written"
    );
}

#[test]
fn a_takeover_waits_for_the_holders_diesel_transaction_to_end() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let exports = exports_table(&mut tables);
    let (a, b) = (family(&table, "a"), family(&table, "b"));
    a.create_table().unwrap();
    // A raw tenure of one second: it lapses while the fenced transaction is open.
    let grant = a.try_acquire("k", Duration::from_secs(1)).unwrap().unwrap();
    let fence = a.fence_statement("k", grant.token()).unwrap();
    let mut conn = diesel_conn();
    let pid: i32 = diesel::select(diesel::dsl::sql::<Integer>("pg_backend_pid()"))
        .get_result(&mut conn)
        .unwrap();
    let (done_tx, done) = bounded(1);

    let thread = conn
        .transaction(|conn| {
            assert!(fence.check_diesel(conn)?, "live: the fence holds");
            // The tenure lapses by the database clock; b then tries to take the key.
            wait_for("the tenure to lapse", Duration::from_secs(10), || {
                let lapsed: bool = client()
                    .query_one(
                        &format!("SELECT held_until < clock_timestamp() FROM {table} WHERE key = 'k'"),
                        &[],
                    )
                    .unwrap()
                    .get(0);
                lapsed.then_some(())
            });
            let thread = std::thread::spawn(move || {
                let _ = done_tx.send(b.try_acquire("k", MINUTE));
            });
            // b's acquire waits on the row this transaction locked FOR SHARE.
            wait_for("b's acquire to wait for the fence's lock", Duration::from_secs(10), || {
                let blocked: i64 = client()
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                        &[&pid],
                    )
                    .unwrap()
                    .get(0);
                (blocked > 0).then_some(())
            });
            assert_eq!(
                done.try_recv().err(),
                Some(TryRecvError::Empty),
                "the takeover must not complete while the fenced transaction is open"
            );
            write(conn, &exports, grant.token())?;
            Ok::<_, BoxError>(thread)
        })
        .unwrap();

    // Committed: now the takeover completes, after the write.
    let taken = done
        .recv_timeout(Duration::from_secs(10))
        .unwrap()
        .unwrap()
        .expect("b takes the lapsed key once the fence's transaction ended");
    thread.join().unwrap();
    assert!(taken.token() > grant.token());
    assert_eq!(
        written(&exports),
        [grant.token()],
        "the holder's write landed"
    );
    let holder = a.holder("k").unwrap().unwrap();
    assert_eq!(holder.owner, "b");
    assert_eq!(holder.token, taken.token());
}

#[test]
fn a_diesel_fence_that_fails_says_why_and_aborts_the_transaction() {
    let mut tables = Tables::new();
    let missing = tables.name("missing");
    // Never created: the fence's table does not exist.
    let leases = family(&missing, "a");
    let fence = leases.fence_statement("k", 1).unwrap();
    let mut conn = diesel_conn();
    let failed = conn
        .transaction(|conn| fence.check_diesel(conn).map_err(BoxError::from))
        .unwrap_err();
    let error = failed.downcast::<pgtenure::Error>().unwrap();
    assert_eq!(error.kind(), ErrorKind::Database);
    let message = error.to_string();
    assert!(message.starts_with("fence lease failed: "), "{message}");
    assert!(
        message.contains("does not exist"),
        "the server's reason: {message}"
    );
    assert!(error.source().is_some(), "Diesel's error is the source");
    // The connection is usable again once the transaction rolled back.
    let one: i32 = diesel::select(diesel::dsl::sql::<Integer>("1"))
        .get_result(&mut conn)
        .unwrap();
    assert_eq!(one, 1);
}

/// Outside a transaction (Diesel's autocommit) the fence's row lock ends with its statement: a
/// `true` there would protect nothing, so it is refused, saying to run it in `conn.transaction`;
/// inside one, begun by Diesel or by a plain `BEGIN`, it holds.
#[test]
fn a_diesel_fence_outside_a_transaction_is_refused() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let a = family(&table, "a");
    a.create_table().unwrap();
    let lease = a.acquire("k", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    let mut conn = diesel_conn();
    let refused = fence.check_diesel(&mut conn).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    assert!(
        refused.to_string().contains("transaction"),
        "says why: {refused}"
    );
    let held = conn
        .transaction(|conn| fence.check_diesel(conn).map_err(BoxError::from))
        .unwrap();
    assert!(held, "inside a Diesel transaction");
    diesel::sql_query("BEGIN").execute(&mut conn).unwrap();
    assert!(
        fence.check_diesel(&mut conn).unwrap(),
        "inside a plain BEGIN"
    );
    diesel::sql_query("COMMIT").execute(&mut conn).unwrap();
    // A fence that does not hold says so, in a transaction or not.
    lease.release().unwrap();
    assert!(!fence.check_diesel(&mut conn).unwrap());
}

/// Through PgBouncer in transaction mode (one server connection, shared by every client): a
/// Diesel fence sends only unnamed statements, so it holds inside a transaction, again and again,
/// and is still refused outside one.
#[test]
fn a_diesel_fence_runs_through_pgbouncer_in_transaction_mode() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let exports = exports_table(&mut tables);
    let a = family(&table, "a");
    a.create_table().unwrap();
    let lease = a.acquire("k", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    let bouncer = pgtenure::testing::PgBouncer::start_with_pool_size(&direct_url(), 1).unwrap();
    for _ in 0..3 {
        let mut conn = PgConnection::establish(bouncer.url()).unwrap();
        conn.transaction(|conn| {
            assert!(fence.check_diesel(conn)?);
            write(conn, &exports, lease.token())
        })
        .unwrap();
        let refused = fence.check_diesel(&mut conn).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    }
    assert_eq!(written(&exports), [lease.token(); 3]);
}
