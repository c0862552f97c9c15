//! Fences as values (`pgtenure::fence::Fence`), for every held thing: the statement and its
//! parameters, run by a plain `postgres::Client` of the test's own (another driver, as far as
//! pgtenure knows: its own connection, types inferred by the server), hold while the thing is held
//! and are refused after it was lost or taken over. And the psql worked example of
//! docs/fencing.md, run as written. With the feature `diesel`, the same through Diesel
//! (`through_diesel.rs`).

#[path = "../common/mod.rs"]
mod common;
mod takeovers;
#[cfg(feature = "diesel")]
mod through_diesel;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{client, db, db_now, direct_url, hand_driven, wait_for, Quiet, Tables};
use pgtenure::elector::Elector;
use pgtenure::fence::{Fence, Param};
use pgtenure::leases::Leases;
use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::postgres::types::ToSql;
use pgtenure::schedule::{Schedule, Scheduler};
use pgtenure::tick_claims::TickClaims;

const MINUTE: Duration = Duration::from_secs(60);

/// Runs `fence` by its text and parameters in a transaction of a plain client, the parameters
/// bound as the driver likes them (types inferred by the server from the statement): whether it
/// returned its row.
fn run_by_text(fence: &Fence) -> bool {
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
    let mut client = client();
    let mut tx = client.transaction().unwrap();
    let rows = tx.query(fence.sql(), &refs).unwrap();
    tx.commit().unwrap();
    assert!(rows.len() <= 1, "a fence returns one row or none: {rows:?}");
    rows.len() == 1
}

/// Runs a held thing's own `fence(&mut tx)` in a transaction of pgtenure's pool.
fn held_form(fence: impl FnOnce(&mut pgtenure::postgres::Transaction<'_>) -> bool) -> bool {
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    let held = fence(&mut tx);
    tx.commit().unwrap();
    held
}

fn types(fence: &Fence) -> Vec<&'static str> {
    fence.params().iter().map(Param::type_name).collect()
}

/// The statement's documented shape: no comment, liveness by clock_timestamp(), a share lock.
fn assert_shape(fence: &Fence, table: &str) {
    let sql = fence.sql();
    assert!(!sql.contains("--"), "comments stripped: {sql}");
    assert!(sql.contains("clock_timestamp()"), "{sql}");
    assert!(sql.contains("FOR SHARE"), "{sql}");
    assert!(
        sql.contains(&format!("\"{table}\"")),
        "table rendered: {sql}"
    );
    assert!(!sql.contains('{'), "every table rendered: {sql}");
}

#[test]
fn a_leases_fence_value_holds_while_held_and_is_refused_after_a_takeover() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let family = |owner: &str| {
        Leases::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (a, b) = (family("a"), family("b"));
    a.create_table().unwrap();
    let lease = a.acquire("k", Duration::from_secs(30)).unwrap().unwrap();
    let fence = lease.fence_statement();
    assert_shape(&fence, &table);
    assert_eq!(types(&fence), ["text", "text", "bigint"]);
    assert_eq!(fence.params()[0].as_str(), Some("k"));
    assert_eq!(fence.params()[1].as_str(), Some("a"));
    assert_eq!(fence.params()[2].as_i64(), Some(lease.token()));
    assert_eq!(a.fence_statement("k", lease.token()).unwrap(), fence);
    assert!(run_by_text(&fence), "held: the value holds");
    assert!(
        held_form(|tx| lease.fence(tx).unwrap()),
        "and the lease's own fence"
    );

    // A takeover: an operator ends the tenure, another owner acquires.
    assert!(b.force_release("k").unwrap());
    let taken = b.try_acquire("k", MINUTE).unwrap().unwrap();
    assert!(taken.token() > lease.token());
    assert!(!run_by_text(&fence), "the stale value is refused");
    assert!(
        !held_form(|tx| lease.fence(tx).unwrap()),
        "and the lease's fence"
    );
    assert!(
        !held_form(|tx| a.fence(tx, "k", taken.token()).unwrap()),
        "a, b's token"
    );
    assert!(run_by_text(&b.fence_statement("k", taken.token()).unwrap()));

    // Bad input is refused before anything is sent.
    let blank = a.fence_statement(" ", 1).unwrap_err();
    assert_eq!(blank.kind(), pgtenure::ErrorKind::InvalidInput);
}

#[test]
fn a_tick_claims_fence_value_holds_while_busy_and_is_refused_after_release_and_the_next_claim() {
    let mut tables = Tables::new();
    let table = tables.name("tick");
    let family = |owner: &str| {
        TickClaims::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (a, b) = (family("a"), family("b"));
    a.create_table().unwrap();
    let now = db_now(&mut client());
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let tick = SystemTime::UNIX_EPOCH + Duration::from_secs(secs - secs % 60) - 5 * MINUTE;

    let claim = a.claim("report", tick, MINUTE).unwrap().unwrap();
    let fence = claim.fence_statement();
    assert_shape(&fence, &table);
    assert_eq!(types(&fence), ["text", "text", "bigint"]);
    assert_eq!(fence.params()[0].as_str(), Some("report"));
    assert_eq!(fence.params()[1].as_str(), Some("a"));
    assert_eq!(fence.params()[2].as_i64(), Some(claim.token()));
    assert!(run_by_text(&fence));
    assert!(held_form(|tx| claim.fence(tx).unwrap()));

    let token = claim.token();
    claim.release().unwrap();
    assert!(!run_by_text(&fence), "released: the busy period ended");
    let next = b.claim("report", tick + MINUTE, MINUTE).unwrap().unwrap();
    assert!(next.token() > token);
    assert!(!run_by_text(&fence), "the next tick's claim began");
    assert!(run_by_text(&next.fence_statement()));
}

#[test]
fn a_schedule_runs_fence_value_holds_during_the_run_and_is_refused_after_it() {
    let mut tables = Tables::new();
    let table = tables.name("tick");
    let (seen_tx, seen) = pgtenure::crossbeam_channel::bounded::<(Fence, bool, i64)>(8);
    let scheduler = Scheduler::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("a")
        .unwrap()
        .job(
            "every-second",
            Schedule::every(Duration::from_secs(1)).unwrap(),
            move |run| {
                let fence = run.fence_statement();
                let held = run_by_text(&fence);
                let _ = seen_tx.try_send((fence, held, run.token()));
                Ok(())
            },
        )
        .unwrap();
    TickClaims::new(&db())
        .with_table(&table)
        .unwrap()
        .create_table()
        .unwrap();
    wait_for("a run", Duration::from_secs(10), || {
        (scheduler.run_pending().unwrap() > 0).then_some(())
    });
    let (fence, held, token) = seen.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(held, "the value held during the run");
    assert_shape(&fence, &table);
    assert_eq!(types(&fence), ["text", "text", "bigint"]);
    assert_eq!(fence.params()[0].as_str(), Some("every-second"));
    assert_eq!(fence.params()[1].as_str(), Some("a"));
    assert_eq!(fence.params()[2].as_i64(), Some(token));
    assert!(!run_by_text(&fence), "the run ended and released its claim");
}

#[test]
fn a_leadership_terms_fence_value_holds_while_leading_and_is_refused_after_the_next_election() {
    let mut tables = Tables::new();
    let table = tables.name("leader");
    let elector = |holder: &str| {
        Elector::new(&db())
            .with_table(&table)
            .unwrap()
            .with_name("billing")
            .unwrap()
            .with_holder(holder)
            .unwrap()
    };
    let (a, b) = (elector("a"), elector("b"));
    a.create_table().unwrap();

    // The campaign's term, pinned when the work begins.
    let leadership = a.campaign().unwrap();
    let term = wait_for("a elected", Duration::from_secs(10), || leadership.term());
    let pinned = leadership.fence_statement().unwrap();
    assert_shape(&pinned, &table);
    assert_eq!(types(&pinned), ["text", "text", "bigint"]);
    assert_eq!(pinned.params()[0].as_str(), Some("billing"));
    assert_eq!(pinned.params()[1].as_str(), Some("a"));
    assert_eq!(pinned.params()[2].as_i64(), Some(term));
    assert_eq!(a.fence_statement(term), pinned);
    assert!(run_by_text(&pinned));
    assert!(held_form(|tx| leadership.fence(tx).unwrap()));
    assert!(held_form(|tx| a.fence(tx, term).unwrap()));

    // The campaign stops (it resigns) and b is elected: a's term is over.
    leadership.stop().unwrap();
    assert!(b.is_leader().unwrap());
    let b_term = b.term().unwrap();
    assert!(b_term > term);
    assert!(!run_by_text(&pinned), "the old term is refused");
    assert!(!held_form(|tx| a.fence(tx, term).unwrap()));
    assert!(run_by_text(&b.fence_statement(b_term)));

    // A campaign that does not lead has no fence to give, and its fence refuses.
    let following = a.campaign().unwrap();
    assert_eq!(following.fence_statement(), None);
    assert!(!held_form(|tx| following.fence(tx).unwrap()));
    following.stop().unwrap();
    b.resign().unwrap();
}

#[test]
fn a_units_fence_value_holds_while_owned_and_stays_pinned_to_its_claim() {
    let mut tables = Tables::new();
    let (processes, units_table) = (tables.name("procs"), tables.name("units"));
    let units = Units::new(&db())
        .with_tables(&processes, &units_table)
        .unwrap();
    units.create_tables().unwrap();
    let unit = Unit::new("acme", 3).unwrap();
    units.add(std::slice::from_ref(&unit)).unwrap();
    let leaser = Leaser::new(&db(), Arc::new(Quiet), hand_driven())
        .unwrap()
        .with_tables(&processes, &units_table)
        .unwrap();
    leaser.heartbeat().unwrap();
    leaser.tick().unwrap();
    assert_eq!(leaser.owned(), std::slice::from_ref(&unit));

    let first = leaser.fence_statement(&unit).unwrap();
    assert_shape(&first, &units_table);
    assert!(first.sql().contains(&format!("\"{processes}\"")));
    assert_eq!(types(&first), ["text", "text", "integer", "bigint"]);
    assert_eq!(first.params()[0].as_str(), Some(leaser.process_id()));
    assert_eq!(first.params()[1].as_str(), Some("acme"));
    assert_eq!(first.params()[2].as_i32(), Some(3));
    assert_eq!(first.params()[3].as_i64(), leaser.token(&unit));
    assert!(run_by_text(&first), "owned: the value holds");
    assert!(held_form(|tx| leaser.fence(tx, &unit).unwrap()));

    // Given back, then claimed again by the same process under a newer token.
    leaser.release().unwrap();
    assert_eq!(leaser.fence_statement(&unit), None);
    assert!(!run_by_text(&first), "given back: refused");
    leaser.tick().unwrap();
    let again = leaser.fence_statement(&unit).unwrap();
    assert!(again.params()[3].as_i64() > first.params()[3].as_i64());
    assert!(run_by_text(&again));
    assert!(!run_by_text(&first), "pinned to its own claim");
    leaser.release().unwrap();
    leaser.delete_process().unwrap();
}

/// The psql worked example of docs/fencing.md, as written there: the block between the markers.
fn psql_example() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fencing.md")).unwrap();
    let start = doc.find("<!-- psql example: begin -->").unwrap();
    let end = doc.find("<!-- psql example: end -->").unwrap();
    let block = &doc[start..end];
    let code = block.split("```sh\n").nth(1).unwrap();
    code.split("```").next().unwrap().to_owned()
}

/// Runs the psql example for `fence`, its protected write aimed at `exports` (the example names
/// `invoice_exports`; the test's own table is put in its place, nothing else changes).
fn run_psql_example(fence: &Fence, exports: &str) -> std::process::Output {
    run_psql_example_at(&direct_url(), fence, exports)
}

/// [`run_psql_example`] with `DATABASE_URL` set to `url`.
fn run_psql_example_at(url: &str, fence: &Fence, exports: &str) -> std::process::Output {
    let script = psql_example().replace("invoice_exports", exports);
    Command::new("sh")
        .arg("-c")
        .arg(&script)
        .env("DATABASE_URL", url)
        .env("PGTENURE_FENCE_SQL", fence.sql())
        .env("PGTENURE_LEASE_KEY", fence.params()[0].to_string())
        .env("PGTENURE_LEASE_OWNER", fence.params()[1].to_string())
        .env("PGTENURE_LEASE_TOKEN", fence.params()[2].to_string())
        .output()
        .unwrap()
}

#[test]
fn the_psql_example_writes_while_the_lease_is_held_and_nothing_after_a_takeover() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let exports = tables.name("exports");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {exports} (token bigint NOT NULL, note text NOT NULL)"
        ))
        .unwrap();
    let family = |owner: &str| {
        Leases::new(&db())
            .with_table(&table)
            .unwrap()
            .with_owner(owner)
            .unwrap()
    };
    let (a, b) = (family("a"), family("b"));
    a.create_table().unwrap();
    let lease = a.acquire("invoice-export", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();

    let held = run_psql_example(&fence, &exports);
    assert!(held.status.success(), "psql: {held:?}");
    let rows = client()
        .query(&format!("SELECT token FROM {exports}"), &[])
        .unwrap();
    let tokens: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(
        tokens,
        [lease.token()],
        "written once, with the lease's token"
    );

    assert!(b.force_release("invoice-export").unwrap());
    b.try_acquire("invoice-export", MINUTE).unwrap().unwrap();
    let stale = run_psql_example(&fence, &exports);
    assert!(stale.status.success(), "psql: {stale:?}");
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(stderr.contains("fence refused"), "says so: {stderr}");
    let count: i64 = client()
        .query_one(&format!("SELECT count(*) FROM {exports}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(count, 1, "the stale holder wrote nothing");
}

/// Behind PgBouncer in transaction mode, a server connection goes from client to client with its
/// session state, prepared statements included (they outlive the transaction that made them, even
/// a rolled-back one): the example must leave none behind, or the next run on that server
/// connection fails to prepare its fence ("prepared statement already exists").
#[test]
fn the_psql_example_runs_again_and_again_through_pgbouncer_in_transaction_mode() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let exports = tables.name("exports");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {exports} (token bigint NOT NULL, note text NOT NULL)"
        ))
        .unwrap();
    let leases = Leases::new(&db())
        .with_table(&table)
        .unwrap()
        .with_owner("a")
        .unwrap();
    leases.create_table().unwrap();
    let lease = leases.acquire("invoice-export", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    // One server connection: every run gets the one the previous run used.
    let bouncer = pgtenure::testing::PgBouncer::start_with_pool_size(&direct_url(), 1).unwrap();
    for run in 1..=3 {
        let out = run_psql_example_at(bouncer.url(), &fence, &exports);
        assert!(
            out.status.success(),
            "run {run} through PgBouncer: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let count: i64 = client()
        .query_one(&format!("SELECT count(*) FROM {exports}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(count, 3, "each run wrote once, fenced");
    lease.release().unwrap();
    let stale = run_psql_example_at(bouncer.url(), &fence, &exports);
    assert!(stale.status.success(), "psql: {stale:?}");
    assert!(String::from_utf8_lossy(&stale.stderr).contains("fence refused"));
}

#[test]
fn the_lease_statement_in_docs_fencing_md_is_the_one_sent_for_the_default_table() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fencing.md")).unwrap();
    let after = doc
        .split("For the default lease table the statement reads:")
        .nth(1)
        .unwrap();
    let shown = after
        .split("```sql\n")
        .nth(1)
        .unwrap()
        .split("\n```")
        .next()
        .unwrap();
    // Only rendered, never sent: the default table need not exist.
    let leases = Leases::new(&db());
    let fence = leases.fence_statement("k", 1).unwrap();
    assert_eq!(fence.sql(), shown);
    let params = format!(
        "-- $1 text = \"k\"\n-- $2 text = {:?}\n-- $3 bigint = 1",
        leases.owner()
    );
    assert_eq!(fence.to_string(), format!("{shown}\n{params}"));
}

/// Drops a schema of the test's own, with all in it.
struct DropSchema(String);

impl Drop for DropSchema {
    fn drop(&mut self) {
        let _ = client().batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0));
    }
}

/// A lease table in a schema of its own, with a mixed-case name (kept as written: rendered
/// double-quoted): the fence value names it so, and runs as it is by a plain client, by the held
/// form and by the psql example (its text passed through a psql variable).
#[test]
fn a_fence_on_a_mixed_case_schema_qualified_table_runs_everywhere() {
    let mut tables = Tables::new();
    let schema = format!("t_fence_schema_{}", std::process::id());
    let _drop = DropSchema(schema.clone());
    client()
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let qualified = format!("{schema}.Odd_Leases");
    let exports = tables.name("exports");
    client()
        .batch_execute(&format!(
            "CREATE TABLE {exports} (token bigint NOT NULL, note text NOT NULL)"
        ))
        .unwrap();
    let leases = Leases::new(&db())
        .with_table(&qualified)
        .unwrap()
        .with_owner("o'wner \\ \"x\"\nline")
        .unwrap();
    leases.create_table().unwrap();
    let key = "ké'y \\ \"q\"\n:owner; --";
    let lease = leases.acquire(key, MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    assert!(
        fence
            .sql()
            .contains(&format!("FROM \"{schema}\".\"Odd_Leases\"")),
        "{}",
        fence.sql()
    );
    assert!(run_by_text(&fence));
    assert!(held_form(|tx| lease.fence(tx).unwrap()));
    let out = run_psql_example(&fence, &exports);
    assert!(out.status.success(), "psql: {out:?}");
    let count: i64 = client()
        .query_one(&format!("SELECT count(*) FROM {exports}"), &[])
        .unwrap()
        .get(0);
    assert_eq!(
        count, 1,
        "the psql example wrote under the odd key and owner"
    );
    lease.release().unwrap();
    assert!(!run_by_text(&fence));
    let out = run_psql_example(&fence, &exports);
    assert!(String::from_utf8_lossy(&out.stderr).contains("fence refused"));
}

/// Drops a role of the test's own (and what was granted to it).
struct DropRole(String);

impl Drop for DropRole {
    fn drop(&mut self) {
        let _ = client().batch_execute(&format!(
            "DROP OWNED BY {0}; DROP ROLE IF EXISTS {0}",
            self.0
        ));
    }
}

/// `FOR SHARE` needs `UPDATE` on a column of the table besides `SELECT`: a writer's role with
/// `SELECT` alone is refused (42501, as docs/fencing.md says); with `UPDATE` on the informational
/// `acquired_at` column, the fence holds.
#[test]
fn a_writers_role_needs_select_and_update_on_one_column_to_fence() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let role = format!("t_fence_writer_{}", std::process::id());
    let _drop = DropRole(role.clone());
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    leases.create_table().unwrap();
    let lease = leases.acquire("k", MINUTE).unwrap().unwrap();
    let fence = lease.fence_statement();
    let mut c = client();
    c.batch_execute(&format!(
        "CREATE ROLE {role}; GRANT SELECT ON {table} TO {role}"
    ))
    .unwrap();
    let as_writer = |c: &mut pgtenure::postgres::Client| {
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&format!("SET LOCAL ROLE {role}")).unwrap();
        let held = fence.check(&mut tx);
        drop(tx);
        held
    };
    let refused = as_writer(&mut c).unwrap_err();
    assert_eq!(refused.kind(), pgtenure::ErrorKind::Database, "{refused}");
    assert!(refused.to_string().contains("42501"), "{refused}");
    c.batch_execute(&format!("GRANT UPDATE (acquired_at) ON {table} TO {role}"))
        .unwrap();
    assert!(
        as_writer(&mut c).unwrap(),
        "SELECT and UPDATE (acquired_at)"
    );
}

/// A leader asked to step down keeps its fence until it has stopped believing (no one else can be
/// elected meanwhile); once it has told `Lost` and resigned, its campaign gives no fence, the
/// value taken while it led is refused, and the next leader's holds.
#[test]
fn a_leader_asked_to_resign_loses_its_fence_with_its_term() {
    use pgtenure::elector::LeaderEvent;
    let mut tables = Tables::new();
    let table = tables.name("leader");
    let elector = |holder: &str| {
        Elector::new(&db())
            .with_table(&table)
            .unwrap()
            .with_holder(holder)
            .unwrap()
            .with_ttl(Duration::from_secs(30))
            .unwrap()
            .with_retry_period(Duration::from_millis(200))
            .unwrap()
    };
    let (a, b) = (elector("a"), elector("b"));
    a.create_table().unwrap();
    let leadership = a.campaign().unwrap();
    let term = wait_for("a elected", Duration::from_secs(10), || leadership.term());
    let pinned = leadership.fence_statement().unwrap();
    assert!(run_by_text(&pinned));
    assert!(b.request_resign().unwrap(), "asked");
    wait_for("a's Lost", Duration::from_secs(10), || {
        leadership.events().try_iter().find_map(|e| match e {
            LeaderEvent::Lost { term: t, .. } if t == term => Some(()),
            _ => None,
        })
    });
    assert_eq!(leadership.fence_statement(), None, "not leading: no fence");
    assert!(!held_form(|tx| leadership.fence(tx).unwrap()));
    let elected = wait_for("b elected", Duration::from_secs(10), || {
        b.is_leader().unwrap().then(|| b.term().unwrap())
    });
    assert!(elected > term);
    assert!(!run_by_text(&pinned), "the old term's value is refused");
    assert!(run_by_text(&b.fence_statement(elected)));
    leadership.stop().unwrap();
    b.resign().unwrap();
}
