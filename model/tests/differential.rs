//! The model and the SQL cannot drift apart silently: for generated small states of the key's row
//! (owner, token, held_until relative to now, managed_token, superseded) and of the token sequence,
//! each leases statement of `sql/leases/` runs against PostgreSQL (rendered for a test table as the
//! library renders it, `pgtenure::testing::render_sql`) and its answer and resulting row must equal
//! what the model's step function ([`Db`]'s methods, the very code the checker runs) gives. One tick
//! of the model is one second; each case runs in a transaction rolled back afterwards, so `now()` is
//! one instant for the set-up, the statement and the read.

use pgtenure_model::leases::{Acquired, Db, Row, Tick, Token};
use postgres::Transaction;

use common::Table;
use failover::{grants, instant, server_timeline};

mod common;
#[path = "common/failover.rs"]
mod failover;

const TTL: Tick = 2;
const OWNERS: [&str; 2] = ["a", "b"];

fn sql(file: &str, table: &str) -> String {
    common::sql("leases", file, table)
}

/// Every generated state: no row, or a row of each shape, each with a sequence behind and ahead of
/// the row's token.
fn states() -> Vec<Db> {
    let mut states = vec![Db::new()];
    for owner in 0..2 {
        for token in [1, 3] {
            for held_until in [-1, 0, 1, 3] {
                for managed_token in [None, Some(token), Some(token - 1)] {
                    for superseded in [false, true] {
                        for seq in [2, 5] {
                            states.push(Db {
                                row: Some(Row {
                                    owner,
                                    token,
                                    held_until,
                                    managed_token,
                                    superseded,
                                }),
                                seq,
                                ..Db::new()
                            });
                        }
                    }
                }
            }
        }
    }
    states
}

fn table() -> Table {
    common::table("leases", "diff", Some("token_seq"))
}

/// Sets the table to `db`'s state inside `tx`.
fn set(tx: &mut Transaction<'_>, table: &str, db: &Db) {
    tx.batch_execute(&format!("DELETE FROM {table}")).unwrap();
    if let Some(row) = &db.row {
        tx.execute(
            &format!(
                "INSERT INTO {table} (key, owner, held_until, token, superseded, acquired_at, \
                 managed_token) VALUES ('k', $1, now() + $2::int * interval '1 second', $3, $4, \
                 now(), $5)"
            ),
            &[
                &OWNERS[row.owner as usize],
                &i32::from(row.held_until),
                &i64::from(row.token),
                &row.superseded,
                &row.managed_token.map(i64::from),
            ],
        )
        .unwrap();
    }
    tx.query(
        &format!("SELECT setval('{table}_token_seq', $1, false)"),
        &[&i64::from(db.seq)],
    )
    .unwrap();
}

/// The table's state as the model sees it, read inside `tx`.
fn get(tx: &mut Transaction<'_>, table: &str) -> Db {
    let row = tx
        .query_opt(
            &format!(
                "SELECT owner, token, round(extract(epoch FROM held_until - now()))::int, \
                 managed_token, superseded FROM {table} WHERE key = 'k'"
            ),
            &[],
        )
        .unwrap()
        .map(|r| Row {
            owner: OWNERS
                .iter()
                .position(|o| *o == r.get::<_, &str>(0))
                .unwrap() as u8,
            token: r.get::<_, i64>(1) as Token,
            held_until: r.get::<_, i32>(2) as Tick,
            managed_token: r.get::<_, Option<i64>>(3).map(|t| t as Token),
            superseded: r.get(4),
        });
    let seq = tx
        .query_one(
            &format!("SELECT last_value, is_called FROM {table}_token_seq"),
            &[],
        )
        .unwrap();
    let last: i64 = seq.get(0);
    let called: bool = seq.get(1);
    Db {
        row,
        seq: (if called { last + 1 } else { last }) as Token,
        ..Db::new()
    }
}

const MICROS: i64 = 1_000_000;

#[test]
fn every_leases_statement_does_what_its_model_step_does() {
    let mut table = table();
    let name = table.name.clone();
    let acquire = sql("acquire.sql", &name);
    let renew_tenure = sql("renew_tenure.sql", &name);
    let renew = sql("renew.sql", &name);
    let release = sql("release.sql", &name);
    let supersede = sql("supersede.sql", &name);
    let force_release = sql("force_release.sql", &name);
    let fence = sql("fence.sql", &name);
    let (acquire, renew_tenure, renew, release, supersede, force_release, fence) = (
        &acquire,
        &renew_tenure,
        &renew,
        &release,
        &supersede,
        &force_release,
        &fence,
    );
    let ttl = i64::from(TTL) * MICROS;
    let none_i64: Option<i64> = None;
    let mut cases = 0;
    let timeline = {
        let mut tx = table.client.transaction().unwrap();
        server_timeline(&mut tx)
    };
    for mut state in states() {
        state.timeline = timeline;
        for owner in 0..2u8 {
            let o = OWNERS[owner as usize];
            for token in [1u8, 3] {
                let t = i64::from(token);
                // (what, the model's step, the statement's outcome as text)
                type Step = Box<dyn Fn(&mut Db) -> String>;
                type Run<'s> = Box<dyn Fn(&mut Transaction<'_>) -> String + 's>;
                let mut steps: Vec<(String, Step, Run<'_>)> = Vec::new();
                for raw in [false, true] {
                    let gated = state.row.as_ref().is_none_or(|row| {
                        !row.superseded
                            && row.managed_token.is_none_or(|t| t == row.token)
                            && state.seq == 5
                    });
                    for grant in grants(gated).into_iter().filter(|_| token == 1) {
                        steps.push((
                            format!("acquire {o} raw={raw} {grant:?}"),
                            Box::new(move |db: &mut Db| {
                                format!("{:?}", db.acquire(0, owner, TTL, raw, &grant, None))
                            }),
                            Box::new(move |tx: &mut Transaction<'_>| {
                                let record = grant.record;
                                let mut at =
                                    |tick: Option<Tick>| tick.map(|tick| instant(tx, tick));
                                let (seen_at, grants_from) =
                                    (at(record.seen_at), at(record.grants_from));
                                let rows = tx
                                    .query(
                                        acquire,
                                        &[
                                            &"k",
                                            &o,
                                            &ttl,
                                            &raw,
                                            &grant.fold,
                                            &grant.hold_off,
                                            &i64::from(record.timeline),
                                            &seen_at,
                                            &grants_from,
                                        ],
                                    )
                                    .unwrap();
                                let granted = rows
                                    .iter()
                                    .filter(|r| !r.get::<_, bool>(2))
                                    .map(|r| (r.get::<_, i64>(0) as Token, r.get::<_, bool>(1)))
                                    .next();
                                let stale = rows.iter().any(|r| r.get::<_, bool>(2));
                                format!("{:?}", Acquired { granted, stale })
                            }),
                        ));
                    }
                }
                steps.push((
                    format!("renew_tenure {o} {token}"),
                    Box::new(move |db: &mut Db| {
                        format!("{:?}", db.renew_tenure(0, owner, token, TTL, None))
                    }),
                    Box::new(move |tx: &mut Transaction<'_>| {
                        let rows = tx
                            .query(renew_tenure, &[&"k", &o, &t, &ttl, &none_i64])
                            .unwrap();
                        format!("{:?}", rows.first().map(|r| r.get::<_, bool>(0)))
                    }),
                ));
                steps.push((
                    format!("release {o} {token}"),
                    Box::new(move |db: &mut Db| format!("{:?}", db.release(0, owner, Some(token)))),
                    Box::new(move |tx: &mut Transaction<'_>| {
                        // With a handover channel: the notification changes no answer.
                        let row = tx
                            .query_one(release, &[&"k", &o, &Some(t), &Some("pgtenure:model")])
                            .unwrap();
                        format!("{:?}", row.get::<_, bool>(0))
                    }),
                ));
                steps.push((
                    format!("fence {o} {token}"),
                    Box::new(move |db: &mut Db| format!("{:?}", db.fence(0, owner, token))),
                    Box::new(move |tx: &mut Transaction<'_>| {
                        let rows = tx.query(fence, &[&"k", &o, &t]).unwrap();
                        format!("{:?}", !rows.is_empty())
                    }),
                ));
                if token == 1 {
                    steps.push((
                        format!("renew {o}"),
                        Box::new(move |db: &mut Db| format!("{:?}", db.renew(0, owner, TTL))),
                        Box::new(move |tx: &mut Transaction<'_>| {
                            let rows = tx.query(renew, &[&vec!["k"], &o, &ttl]).unwrap();
                            format!(
                                "{:?}",
                                rows.first()
                                    .map(|r| (r.get::<_, i64>(1) as Token, r.get::<_, bool>(2)))
                            )
                        }),
                    ));
                    steps.push((
                        format!("release {o} by key"),
                        Box::new(move |db: &mut Db| format!("{:?}", db.release(0, owner, None))),
                        Box::new(move |tx: &mut Transaction<'_>| {
                            let row = tx
                                .query_one(release, &[&"k", &o, &none_i64, &None::<&str>])
                                .unwrap();
                            format!("{:?}", row.get::<_, bool>(0))
                        }),
                    ));
                }
                if owner == 0 && token == 1 {
                    steps.push((
                        "supersede".into(),
                        Box::new(|db: &mut Db| format!("{:?}", db.supersede(0))),
                        Box::new(move |tx: &mut Transaction<'_>| {
                            let row = tx.query_one(supersede, &[&"k"]).unwrap();
                            format!("{:?}", row.get::<_, bool>(0))
                        }),
                    ));
                    for fold in [false, true] {
                        steps.push((
                            format!("force_release fold={fold}"),
                            Box::new(move |db: &mut Db| {
                                let owner = db.force_release(0, fold);
                                format!("{:?}", owner.map(|o| OWNERS[o as usize]))
                            }),
                            Box::new(move |tx: &mut Transaction<'_>| {
                                let rows = tx
                                    .query(force_release, &[&"k", &fold, &Some("pgtenure:model")])
                                    .unwrap();
                                format!("{:?}", rows.first().map(|r| r.get::<_, String>(0)))
                            }),
                        ));
                    }
                }
                for (what, step, run) in &steps {
                    let mut model = state.clone();
                    let model_answer = step(&mut model);
                    let mut tx = table.client.transaction().unwrap();
                    set(&mut tx, &name, &state);
                    let answer = run(&mut tx);
                    let after = get(&mut tx, &name);
                    tx.rollback().unwrap();
                    assert_eq!(
                        (&answer, &after),
                        (&model_answer, &model),
                        "{what} on {state:?}: PostgreSQL (left) and the model (right) differ"
                    );
                    cases += 1;
                }
            }
        }
    }
    println!("{cases} statements compared with the model");
}
