//! Every takeover waits for the holder's open fenced transaction, whoever sent the fence: here a
//! plain `postgres::Client` of the test's own runs each held thing's fence value (the statement
//! text with the parameters bound, types inferred by the server), the tenure then lapses by the
//! database clock while the transaction is still open, and the next holder's acquire, claim or
//! election waits (a unit's claimer skips the locked unit) until the transaction has committed.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, SystemTime};

use pgtenure::elector::Elector;
use pgtenure::fence::{Fence, Param};
use pgtenure::leases::Leases;
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::postgres::types::ToSql;
use pgtenure::tick_claims::TickClaims;

use crate::common::{client, db, db_now, hand_driven, wait_for, Quiet, Tables};

const WAIT: Duration = Duration::from_secs(20);

/// A plain client's transaction that ran a fence, left open.
struct Fenced {
    client: pgtenure::postgres::Client,
    pid: i32,
}

impl Fenced {
    /// Opens a transaction on a plain client, runs `fence` in it (it must hold) and makes the
    /// protected write into `ledger`, leaving the transaction open.
    fn open(fence: &Fence, ledger: &str) -> Fenced {
        let mut client = client();
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .unwrap()
            .get(0);
        client.batch_execute("BEGIN").unwrap();
        let params: Vec<Box<dyn ToSql + Sync>> = fence
            .params()
            .iter()
            .map(|param| -> Box<dyn ToSql + Sync> {
                match param {
                    Param::Text(text) => Box::new(text.clone()),
                    Param::Int8(value) => Box::new(*value),
                    Param::Int4(value) => Box::new(*value),
                    other => panic!("a parameter type this test does not know: {other:?}"),
                }
            })
            .collect();
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p).collect();
        let rows = client.query(fence.sql(), &refs).unwrap();
        assert_eq!(rows.len(), 1, "the fence holds while the tenure is live");
        client
            .batch_execute(&format!(
                "INSERT INTO {ledger} (at) VALUES (clock_timestamp())"
            ))
            .unwrap();
        Fenced { client, pid }
    }

    /// Whether another backend waits for a lock this transaction holds.
    fn blocks_someone(&self) -> bool {
        client()
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                 WHERE $1 = ANY (pg_blocking_pids(pid)))",
                &[&self.pid],
            )
            .unwrap()
            .get(0)
    }

    fn commit(mut self) {
        self.client.batch_execute("COMMIT").unwrap();
    }
}

fn ledger(tables: &mut Tables) -> String {
    let ledger = tables.name("ledger");
    client()
        .batch_execute(&format!("CREATE TABLE {ledger} (at timestamptz NOT NULL)"))
        .unwrap();
    ledger
}

/// Waits until `sql` (one boolean) is true, by the database clock.
fn wait_until(what: &str, sql: &str) {
    let mut c = client();
    wait_for(what, WAIT, || {
        c.query_one(sql, &[])
            .unwrap()
            .get::<_, bool>(0)
            .then_some(())
    });
}

/// Runs `takeover` on a thread while `fenced` is open: it must wait for the fenced transaction,
/// and finish only once it committed. Returns what the takeover returned.
fn takeover_waits<T: Send + 'static>(
    fenced: Fenced,
    takeover: impl FnOnce() -> T + Send + 'static,
) -> T {
    let thread = thread::spawn(takeover);
    wait_for(
        "the takeover to wait for the fenced transaction",
        WAIT,
        || fenced.blocks_someone().then_some(()),
    );
    assert!(!thread.is_finished(), "the takeover is still waiting");
    fenced.commit();
    thread.join().unwrap()
}

#[test]
fn a_lease_taken_after_a_lapse_waits_for_the_fenced_transaction() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let ledger = ledger(&mut tables);
    let family = |owner: &str| {
        Leases::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (a, b) = (family("a"), family("b"));
    a.create_table().unwrap();
    let grant = a
        .try_acquire("k", Duration::from_millis(500))
        .unwrap()
        .unwrap();
    let fenced = Fenced::open(&a.fence_statement("k", grant.token()).unwrap(), &ledger);
    wait_until(
        "the lease to lapse",
        &format!("SELECT held_until <= now() FROM {table} WHERE key = 'k'"),
    );
    let taken = takeover_waits(fenced, move || {
        b.try_acquire("k", Duration::from_secs(60)).unwrap()
    });
    let taken = taken.expect("b acquires once the fenced transaction ended");
    assert!(taken.token() > grant.token());
    let written: i64 = client()
        .query_one(&format!("SELECT count(*) FROM {ledger}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(written, 1, "the fenced write committed");
}

#[test]
fn a_force_release_waits_for_the_fenced_transaction() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let ledger = ledger(&mut tables);
    let a = Leases::new(&db()).with_table(&table).unwrap();
    a.create_table().unwrap();
    let lease = a.acquire("k", Duration::from_secs(60)).unwrap().unwrap();
    let fenced = Fenced::open(&lease.fence_statement(), &ledger);
    let operator = a.clone();
    let released = takeover_waits(fenced, move || operator.force_release("k").unwrap());
    assert!(
        released,
        "the force release ended the tenure after the write"
    );
    assert!(!lease
        .fence_statement()
        .check(&mut db().connection().unwrap().transaction().unwrap())
        .unwrap());
}

#[test]
fn the_next_ticks_claim_waits_for_the_fenced_transaction() {
    let mut tables = Tables::new();
    let table = tables.name("tick");
    let ledger = ledger(&mut tables);
    let family = |owner: &str| {
        TickClaims::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (a, b) = (family("a"), family("b"));
    a.create_table().unwrap();
    let secs = db_now(&mut client())
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % 60 - 300);
    let claim = a
        .claim("report", tick, Duration::from_millis(500))
        .unwrap()
        .unwrap();
    let fenced = Fenced::open(&claim.fence_statement(), &ledger);
    wait_until(
        "the busy period to lapse",
        &format!("SELECT busy_until <= now() FROM {table} WHERE job_id = 'report'"),
    );
    let next = tick + Duration::from_secs(60);
    let taken = takeover_waits(fenced, move || {
        b.claim("report", next, Duration::from_secs(60)).unwrap()
    });
    assert!(
        taken
            .expect("the next tick is claimed after the write")
            .token()
            > claim.token()
    );
}

#[test]
fn an_election_after_a_lapse_waits_for_the_fenced_transaction() {
    let mut tables = Tables::new();
    let table = tables.name("leader");
    let ledger = ledger(&mut tables);
    let elector = |holder: &str| {
        Elector::new(&db())
            .with_table(&table)
            .unwrap()
            .with_holder(holder)
            .unwrap()
            .with_ttl(Duration::from_millis(500))
            .unwrap()
    };
    let (a, b) = (elector("a"), elector("b"));
    a.create_table().unwrap();
    assert!(a.is_leader().unwrap());
    let term = a.term().unwrap();
    let fenced = Fenced::open(&a.fence_statement(term), &ledger);
    wait_until(
        "the term to lapse",
        &format!("SELECT expires_at <= now() FROM {table} WHERE name = 'default'"),
    );
    let b2 = b.clone();
    let elected = takeover_waits(fenced, move || b2.is_leader().unwrap());
    assert!(elected, "b is elected once the fenced transaction ended");
    assert!(b.term().unwrap() > term);
    b.resign().unwrap();
}

#[test]
fn a_unit_is_claimed_by_another_process_only_after_the_fenced_transaction() {
    let mut tables = Tables::new();
    let (processes, units_table) = (tables.name("procs"), tables.name("units"));
    let ledger = ledger(&mut tables);
    let units = Units::new(&db())
        .with_tables(&processes, &units_table)
        .unwrap();
    units.create_tables().unwrap();
    let unit = Unit::new("acme", 1).unwrap();
    units.add(std::slice::from_ref(&unit)).unwrap();
    let leaser = || {
        Leaser::new(&db(), Arc::new(Quiet), hand_driven())
            .unwrap()
            .with_tables(&processes, &units_table)
            .unwrap()
    };
    let (a, b) = (leaser(), leaser());
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let fence = a.fence_statement(&unit).expect("a owns the unit");
    let fenced = Fenced::open(&fence, &ledger);
    // A pauses: its process row expires while its fenced transaction is open.
    client()
        .batch_execute(&format!(
            "UPDATE {processes} SET expires_at = now() WHERE process_id = '{}'",
            a.process_id()
        ))
        .unwrap();
    b.heartbeat().unwrap();
    assert_eq!(b.tick().unwrap().claimed, 0, "the locked unit is skipped");
    assert_eq!(b.owned(), []);
    fenced.commit();
    assert_eq!(
        b.tick().unwrap().claimed,
        1,
        "claimed once the write committed"
    );
    assert!(b.token(&unit) > fence.params()[3].as_i64());
    b.release().unwrap();
    b.delete_process().unwrap();
    a.delete_process().unwrap();
}

/// Runs `fence` by a plain client in a transaction begun (with `isolation`) before the tenure
/// lapsed, after it lapsed by the database clock (`lapsed`, one boolean): whether it held.
fn late_in_a_long_transaction(fence: &Fence, isolation: &str, lapsed: &str) -> bool {
    let mut c = client();
    c.batch_execute(&format!("BEGIN ISOLATION LEVEL {isolation}"))
        .unwrap();
    // The transaction's start (now()) and, under REPEATABLE READ, its snapshot: before the lapse.
    c.query_one("SELECT now()", &[]).unwrap();
    wait_until("the tenure to lapse", lapsed);
    let params: Vec<Box<dyn ToSql + Sync>> = fence
        .params()
        .iter()
        .map(|param| -> Box<dyn ToSql + Sync> {
            match param {
                Param::Text(text) => Box::new(text.clone()),
                Param::Int8(value) => Box::new(*value),
                Param::Int4(value) => Box::new(*value),
                other => panic!("a parameter type this test does not know: {other:?}"),
            }
        })
        .collect();
    let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| &**p).collect();
    let held = !c.query(fence.sql(), &refs).unwrap().is_empty();
    c.batch_execute("ROLLBACK").unwrap();
    held
}

/// A fence run late in a transaction that began while the tenure was live judges liveness by the
/// clock at that moment (`clock_timestamp()`), not by the transaction's start (`now()`), under
/// READ COMMITTED and REPEATABLE READ alike, for every held thing.
#[test]
fn a_fence_late_in_a_long_transaction_is_refused_once_the_tenure_lapsed() {
    let mut tables = Tables::new();
    let short = Duration::from_millis(700);
    for isolation in ["READ COMMITTED", "REPEATABLE READ"] {
        let lease_t = tables.name("lease");
        let leases = Leases::new(&db()).with_table(&lease_t).unwrap();
        leases.create_table().unwrap();
        let grant = leases.try_acquire("k", short).unwrap().unwrap();
        let fence = leases.fence_statement("k", grant.token()).unwrap();
        let lapsed = format!("SELECT held_until <= now() FROM {lease_t} WHERE key = 'k'");
        assert!(
            !late_in_a_long_transaction(&fence, isolation, &lapsed),
            "lease, {isolation}"
        );

        let tick_t = tables.name("tick");
        let ticks = TickClaims::new(&db()).with_table(&tick_t).unwrap();
        ticks.create_table().unwrap();
        let secs = db_now(&mut client())
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % 60 - 300);
        let claim = ticks.claim("job", tick, short).unwrap().unwrap();
        let lapsed = format!("SELECT busy_until <= now() FROM {tick_t} WHERE job_id = 'job'");
        assert!(
            !late_in_a_long_transaction(&claim.fence_statement(), isolation, &lapsed),
            "tick claim, {isolation}"
        );

        let leader_t = tables.name("leader");
        let elector = Elector::new(&db())
            .with_table(&leader_t)
            .unwrap()
            .with_ttl(short)
            .unwrap();
        elector.create_table().unwrap();
        assert!(elector.is_leader().unwrap());
        let fence = elector.fence_statement(elector.term().unwrap());
        let lapsed = format!("SELECT expires_at <= now() FROM {leader_t}");
        assert!(
            !late_in_a_long_transaction(&fence, isolation, &lapsed),
            "leadership term, {isolation}"
        );

        let (procs, units_t) = (tables.name("procs"), tables.name("units"));
        let units = Units::new(&db()).with_tables(&procs, &units_t).unwrap();
        units.create_tables().unwrap();
        let unit = Unit::new("acme", 1).unwrap();
        units.add(std::slice::from_ref(&unit)).unwrap();
        let leaser = Leaser::new(&db(), Arc::new(Quiet), hand_driven())
            .unwrap()
            .with_tables(&procs, &units_t)
            .unwrap();
        leaser.heartbeat().unwrap();
        leaser.tick().unwrap();
        let fence = leaser.fence_statement(&unit).expect("owned");
        // Its process row lapses soon (as if its heartbeats stopped).
        client()
            .batch_execute(&format!(
                "UPDATE {procs} SET expires_at = now() + interval '700 ms' WHERE process_id = '{}'",
                leaser.process_id()
            ))
            .unwrap();
        let lapsed = format!("SELECT bool_and(expires_at <= now()) FROM {procs}");
        assert!(
            !late_in_a_long_transaction(&fence, isolation, &lapsed),
            "unit, {isolation}"
        );
        leaser.delete_process().unwrap();
    }
}
