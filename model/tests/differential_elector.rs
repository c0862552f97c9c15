//! The elector model and the SQL cannot drift apart silently: for generated small states of the
//! fleet's row (holder, term, expires_at relative to now, resign_requested) and of the term
//! sequence, each elector statement of `sql/elector/` runs against PostgreSQL (rendered for a test
//! table as the library renders it, `pgtenure::testing::render_sql`) and its answer and resulting
//! row must equal what the model's step function ([`Db`]'s methods, the very code the checker
//! runs) gives. One tick of the model is one second; each case runs in a transaction rolled back
//! afterwards, so `now()` is one instant for the set-up, the statement and the read.

use std::time::SystemTime;

use pgtenure_model::elector::{Db, PollAnswer, Row, Term, Tick};
use pgtenure_model::failover::Grant;
use postgres::Transaction;

use common::Table;
use failover::{grants, instant, server_timeline};

mod common;
#[path = "common/failover.rs"]
mod failover;

const TTL: Tick = 2;
const HOLDERS: [&str; 3] = ["a", "b", "c"];
/// How long before `now()` a generated row was elected (a renewal keeps it, a new tenure sets it
/// to `now()`).
const ELECTED_AGO: i32 = 5;

fn sql(file: &str, table: &str) -> String {
    common::sql("elector", file, table)
}

/// Every generated state: no row, or a row of each shape, each with a sequence behind and ahead of
/// the row's term.
fn states() -> Vec<Db> {
    let mut states = vec![Db::new()];
    for holder in 0..2 {
        for term in [1, 3] {
            for expires_at in [-1, 0, 1, 3] {
                for resign_requested in [false, true] {
                    for seq in [2, 5] {
                        states.push(Db {
                            row: Some(Row {
                                holder,
                                term,
                                expires_at,
                                resign_requested,
                            }),
                            seq,
                            ..Db::new()
                        });
                    }
                }
            }
        }
    }
    states
}

fn table() -> Table {
    common::table("elector", "elector", Some("term_seq"))
}

/// Sets the table to `db`'s state inside `tx`.
fn set(tx: &mut Transaction<'_>, table: &str, db: &Db) {
    tx.batch_execute(&format!("DELETE FROM {table}")).unwrap();
    if let Some(row) = &db.row {
        tx.execute(
            &format!(
                "INSERT INTO {table} (name, holder, expires_at, term, elected_at, \
                 resign_requested) VALUES ('f', $1, now() + $2::int * interval '1 second', $3, \
                 now() - $4::int * interval '1 second', $5)"
            ),
            &[
                &HOLDERS[row.holder as usize],
                &i32::from(row.expires_at),
                &i64::from(row.term),
                &ELECTED_AGO,
                &row.resign_requested,
            ],
        )
        .unwrap();
    }
    tx.query(
        &format!("SELECT setval('{table}_term_seq', $1, false)"),
        &[&i64::from(db.seq)],
    )
    .unwrap();
}

fn holder(name: &str) -> u8 {
    HOLDERS.iter().position(|h| *h == name).unwrap() as u8
}

/// The table's state as the model sees it, read inside `tx`, and whether the row's `elected_at`
/// is `now()` (else it is the generated one).
fn get(tx: &mut Transaction<'_>, table: &str) -> (Db, Option<bool>) {
    let row = tx
        .query_opt(
            &format!(
                "SELECT holder, term, round(extract(epoch FROM expires_at - now()))::int, \
                 resign_requested, elected_at = now() FROM {table} WHERE name = 'f'"
            ),
            &[],
        )
        .unwrap();
    let elected_now = row.as_ref().map(|r| r.get::<_, bool>(4));
    let row = row.map(|r| Row {
        holder: holder(r.get(0)),
        term: r.get::<_, i64>(1) as Term,
        expires_at: r.get::<_, i32>(2) as Tick,
        resign_requested: r.get(3),
    });
    let seq = tx
        .query_one(
            &format!("SELECT last_value, is_called FROM {table}_term_seq"),
            &[],
        )
        .unwrap();
    let last: i64 = seq.get(0);
    let called: bool = seq.get(1);
    let db = Db {
        row,
        seq: (if called { last + 1 } else { last }) as Term,
        ..Db::new()
    };
    (db, elected_now)
}

/// `at` in ticks (whole seconds) relative to `now`.
fn ticks(at: SystemTime, now: SystemTime) -> Tick {
    match at.duration_since(now) {
        Ok(after) => after.as_secs_f64().round() as Tick,
        Err(before) => -(before.duration().as_secs_f64().round() as Tick),
    }
}

const MICROS: i64 = 1_000_000;

/// One case: what, the model's step (its answer as text), the statement's (its answer as text).
type Step = Box<dyn Fn(&mut Db) -> String>;
type Run<'s> = Box<dyn Fn(&mut Transaction<'_>) -> String + 's>;

/// The poll (is_leader.sql) of `h` guarded by `guard` with `grant` (`$5`..`$9`), both ways; its
/// newest term won (`$11`) is `guard`'s.
fn poll<'s>(
    is_leader: &'s str,
    h: u8,
    guard: Option<Term>,
    grant: Grant,
) -> (String, Step, Run<'s>) {
    poll_after(is_leader, h, (guard, guard), grant)
}

/// [`poll`] with the newest term won (`$11`) given: `(guard, last)`.
fn poll_after<'s>(
    is_leader: &'s str,
    h: u8,
    (guard, last): (Option<Term>, Option<Term>),
    grant: Grant,
) -> (String, Step, Run<'s>) {
    let name = HOLDERS[h as usize];
    let ttl = i64::from(TTL) * MICROS;
    // The library always sends its retry period as `$10`: a tick here.
    let grant = Grant { prefer: 1, ..grant };
    (
        format!("is_leader {name} guard {guard:?} last {last:?} {grant:?}"),
        Box::new(move |db: &mut Db| {
            format!("{:?}", db.is_leader(0, h, TTL, (guard, last), &grant, None))
        }),
        Box::new(move |tx: &mut Transaction<'_>| {
            let now: SystemTime = tx.query_one("SELECT now()", &[]).unwrap().get(0);
            let (guard, last) = (guard.map(i64::from), last.map(i64::from));
            let record = grant.record;
            let mut at = |tick: Option<Tick>| tick.map(|tick| instant(tx, tick));
            let (seen_at, grants_from) = (at(record.seen_at), at(record.grants_from));
            let rows = tx
                .query(
                    is_leader,
                    &[
                        &"f",
                        &name,
                        &ttl,
                        &guard,
                        &grant.fold,
                        &grant.hold_off,
                        &i64::from(record.timeline),
                        &seen_at,
                        &grants_from,
                        &(i64::from(grant.prefer) * MICROS),
                        &last,
                    ],
                )
                .unwrap();
            let answer = rows.first().map_or_else(PollAnswer::default, |r| {
                let leader = r.get::<_, Option<&str>>("holder").map(|leader| {
                    (
                        holder(leader),
                        r.get::<_, i64>("term") as Term,
                        ticks(r.get("expires_at"), now),
                    )
                });
                PollAnswer {
                    leader,
                    mine: r.get("mine"),
                    ended: r.get("ended"),
                    my_term: r.get::<_, Option<i64>>("my_term").map(|t| t as Term),
                    stale: r.get("stale"),
                    held_off: (r.get::<_, Option<i64>>("held_off_us"))
                        .map(|us| (us as f64 / MICROS as f64).round() as Tick),
                }
            });
            format!("{answer:?}")
        }),
    )
}

/// Every statement the model steps, for holders `h` and terms `term`; the polls with the hold-off
/// gate's records too when `gated`.
fn cases<'s>(
    statements: &'s [String; 4],
    h: u8,
    term: Term,
    gated: bool,
) -> Vec<(String, Step, Run<'s>)> {
    let [is_leader, resign, request_resign, fence] = statements;
    let name = HOLDERS[h as usize];
    let t = i64::from(term);
    let mut cases = vec![poll(is_leader, h, Some(term), Grant::plain())];
    cases.push((
        format!("resign {name} {term}"),
        Box::new(move |db: &mut Db| format!("{:?}", db.resign(0, h, term))),
        Box::new(move |tx: &mut Transaction<'_>| {
            // With a handover channel: the notification changes no answer.
            let channel = Some("pgtenure:model");
            let rows = tx
                .query(resign.as_str(), &[&"f", &name, &t, &channel])
                .unwrap();
            format!("{:?}", !rows.is_empty())
        }),
    ));
    cases.push((
        format!("fence {name} {term}"),
        Box::new(move |db: &mut Db| format!("{:?}", db.fence(0, h, term))),
        Box::new(move |tx: &mut Transaction<'_>| {
            let rows = tx.query(fence.as_str(), &[&"f", &name, &t]).unwrap();
            format!("{:?}", !rows.is_empty())
        }),
    ));
    if term == 1 {
        // Plain, folded, and (on the gated states) held off with each record.
        for grant in grants(gated) {
            cases.push(poll(is_leader, h, None, grant));
            if grant.hold_off {
                cases.push(poll(is_leader, h, Some(term), grant));
                // A tenure ended whose term is above every generated row's: one an asynchronous
                // standby never received (prefer).
                cases.push(poll_after(is_leader, h, (None, Some(4)), grant));
            }
        }
    }
    if term == 1 && h == 0 {
        cases.push((
            "request_resign".into(),
            Box::new(|db: &mut Db| format!("{:?}", db.request_resign(0))),
            Box::new(move |tx: &mut Transaction<'_>| {
                let rows = tx.query(request_resign.as_str(), &[&"f"]).unwrap();
                format!(
                    "{:?}",
                    rows.first()
                        .map(|r| (holder(r.get(0)), r.get::<_, i64>(1) as Term))
                )
            }),
        ));
    }
    cases
}

#[test]
fn every_elector_statement_does_what_its_model_step_does() {
    let mut table = table();
    let name = table.name.clone();
    let statements = [
        sql("is_leader.sql", &name),
        sql("resign.sql", &name),
        sql("request_resign.sql", &name),
        sql("fence.sql", &name),
    ];
    let mut compared = 0;
    let timeline = {
        let mut tx = table.client.transaction().unwrap();
        server_timeline(&mut tx)
    };
    for mut state in states() {
        state.timeline = timeline;
        let gated = state.seq == 5 && state.row.as_ref().is_none_or(|row| !row.resign_requested);
        for h in 0..3u8 {
            for term in [1, 3] {
                for (what, step, run) in cases(&statements, h, term, gated) {
                    let mut model = state.clone();
                    let model_answer = step(&mut model);
                    let mut tx = table.client.transaction().unwrap();
                    set(&mut tx, &name, &state);
                    let answer = run(&mut tx);
                    let (after, elected_now) = get(&mut tx, &name);
                    tx.rollback().unwrap();
                    assert_eq!(
                        (&answer, &after),
                        (&model_answer, &model),
                        "{what} on {state:?}: PostgreSQL (left) and the model (right) differ"
                    );
                    // elected_at (not modelled) is now() exactly when a new tenure began.
                    let new_tenure = model.row.as_ref().map(|row| {
                        state
                            .row
                            .as_ref()
                            .is_none_or(|before| before.term != row.term)
                    });
                    assert_eq!(elected_now, new_tenure, "{what} on {state:?}: elected_at");
                    compared += 1;
                }
            }
        }
    }
    println!("{compared} statements compared with the model");
}

/// fence.sql reads `clock_timestamp()`, not the transaction's `now()`, as the model's step does
/// (its clock is the tick the statement executes at, the transaction having begun earlier): in one
/// transaction, every generated row (each under a fleet name of its own), a tick later, is fenced
/// for every holder and term and compared with `Db::fence` at tick 1. A fence reading `now()`
/// would admit the rows that expire at tick 1.
#[test]
fn fence_reads_the_clock_when_it_executes() {
    let mut table = common::table("elector", "elector_clock", Some("term_seq"));
    let name = table.name.clone();
    let fence = sql("fence.sql", &name);
    let states: Vec<Db> = states().into_iter().filter(|s| s.row.is_some()).collect();
    let mut tx = table.client.transaction().unwrap();
    for (i, state) in states.iter().enumerate() {
        let row = state.row.as_ref().unwrap();
        tx.execute(
            &format!(
                "INSERT INTO {name} (name, holder, expires_at, term, elected_at, \
                 resign_requested) VALUES ($1, $2, now() + $3::int * interval '1 second', $4, \
                 now(), $5)"
            ),
            &[
                &format!("f{i}"),
                &HOLDERS[row.holder as usize],
                &i32::from(row.expires_at),
                &i64::from(row.term),
                &row.resign_requested,
            ],
        )
        .unwrap();
    }
    // Real time is the subject: the clock passes one tick (a second) past the transaction's now().
    tx.batch_execute("SELECT pg_sleep(1.1)").unwrap();
    let mut compared = 0;
    for (i, state) in states.iter().enumerate() {
        for h in 0..3u8 {
            for term in [1, 3] {
                let rows = tx
                    .query(
                        fence.as_str(),
                        &[&format!("f{i}"), &HOLDERS[h as usize], &i64::from(term)],
                    )
                    .unwrap();
                assert_eq!(
                    !rows.is_empty(),
                    state.fence(1, h, term),
                    "fence {h} {term} a tick into a transaction on {state:?}: PostgreSQL (left) \
                     and the model (right) differ"
                );
                compared += 1;
            }
        }
    }
    tx.rollback().unwrap();
    assert!(states.iter().any(|s| s.fence(0, 0, 1) && !s.fence(1, 0, 1)));
    println!("{compared} fences compared with the model a tick into their transaction");
}

/// Whether `sql` with `params`, run by `probe` in a transaction rolled back afterwards, waits for
/// another transaction's lock (cancelled by the lock timeout: SQLSTATE 55P03).
fn waits(
    probe: &mut postgres::Client,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> bool {
    let mut tx = probe.transaction().unwrap();
    tx.batch_execute("SET LOCAL lock_timeout = '200ms'")
        .unwrap();
    let waited = match tx.query(sql, params) {
        Ok(_) => false,
        Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => true,
        Err(e) => panic!("{sql}: {e}"),
    };
    tx.rollback().unwrap();
    waited
}

/// The checker's rule for a fence's FOR SHARE lock (`Election::waits_for_a_fence`: a statement
/// waits when it would update the row) against PostgreSQL: with `a`'s term 1 fenced in an open
/// transaction, another connection's statements are run with a lock timeout. While the tenure is
/// live, `b`'s poll matches no row and does not wait, `a`'s renewal, its resignation and a request
/// to resign wait; once it expired, `b`'s poll (a new election) waits.
#[test]
fn a_fence_makes_the_row_s_updates_wait() {
    let mut table = common::table("elector", "elector_lock", Some("term_seq"));
    let name = table.name.clone();
    let url = pgtenure::testing::database_url().expect("a database");
    let mut probe = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let [is_leader, resign, request_resign, fence] = [
        sql("is_leader.sql", &name),
        sql("resign.sql", &name),
        sql("request_resign.sql", &name),
        sql("fence.sql", &name),
    ];
    table
        .client
        .execute(
            &format!(
                "INSERT INTO {name} (name, holder, expires_at, term, elected_at) \
                 VALUES ('f', 'a', clock_timestamp() + interval '1 second', 1, now())"
            ),
            &[],
        )
        .unwrap();
    let mut fenced = table.client.transaction().unwrap();
    assert_eq!(
        fenced
            .query(fence.as_str(), &[&"f", &"a", &1i64])
            .unwrap()
            .len(),
        1
    );
    let ttl = i64::from(TTL) * MICROS;
    let none: Option<SystemTime> = None;
    let poll = |probe: &mut postgres::Client, holder: &str, guard: Option<i64>| {
        waits(
            probe,
            &is_leader,
            &[
                &"f", &holder, &ttl, &guard, &false, &false, &1i64, &none, &none, &0i64, &guard,
            ],
        )
    };
    // The model's rule on the same row: live (expires at 1) and then expired (at 0).
    let changes = |expires_at: Tick, step: &dyn Fn(&mut Db)| {
        let before = Db {
            row: Some(Row {
                holder: 0,
                term: 1,
                expires_at,
                resign_requested: false,
            }),
            seq: 2,
            ..Db::new()
        };
        let mut after = before.clone();
        step(&mut after);
        after.row != before.row
    };
    let plain = Grant::plain();
    let live: [(&str, bool, bool); 4] = [
        (
            "b's poll",
            poll(&mut probe, "b", None),
            changes(1, &|db| {
                db.is_leader(0, 1, TTL, (None, None), &plain, None);
            }),
        ),
        (
            "a's renewal",
            poll(&mut probe, "a", Some(1)),
            changes(1, &|db| {
                db.is_leader(0, 0, TTL, (Some(1), Some(1)), &plain, None);
            }),
        ),
        (
            "a's resignation",
            waits(&mut probe, &resign, &[&"f", &"a", &1i64, &None::<&str>]),
            changes(1, &|db| {
                db.resign(0, 0, 1);
            }),
        ),
        (
            "a request to resign",
            waits(&mut probe, &request_resign, &[&"f"]),
            changes(1, &|db| {
                db.request_resign(0);
            }),
        ),
    ];
    for (what, postgres, model) in live {
        assert_eq!(
            postgres, model,
            "{what} on a live fenced tenure: PostgreSQL (left) waits, the model (right)"
        );
    }
    assert!(!live[0].1 && live[1].1, "the cases differ");
    // Real time is the subject: the fenced tenure expires while its transaction is open.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let takeover = poll(&mut probe, "b", None);
    let model = changes(0, &|db| {
        db.is_leader(0, 1, TTL, (None, None), &plain, None);
    });
    assert!(
        takeover && model,
        "b's poll of the expired fenced tenure: PostgreSQL {takeover}, the model {model}"
    );
    fenced.rollback().unwrap();
    assert!(
        !poll(&mut probe, "b", None),
        "no lock once the fenced transaction ended"
    );
}
