//! The tick-claims model and the SQL cannot drift apart silently: for generated small states of the
//! job's row (tick and busy_until relative to now, owner, token, claim id), each statement of
//! `sql/tick_claims/` the model has (claim, extend, release, fence) runs against PostgreSQL
//! (rendered for a test table as the library renders it, `pgtenure::testing::render_sql`) and its
//! answer and resulting row must equal what the model's step function ([`Db`]'s methods, the very
//! code the checker runs) gives. One tick of the model is one second; each case runs in a
//! transaction rolled back afterwards, so `now()` is one instant for the set-up, the statement and
//! the read (and `clock_timestamp()`, the fence's clock, is within a second of it).

use pgtenure_model::ticks::{Claim, ClaimId, Claimed, Db, Row, Tick, Token};
use postgres::Transaction;

use common::Table;

mod common;
use std::time::{Duration, SystemTime};

const BUSY: Tick = 2;
const OWNERS: [&str; 2] = ["a", "b"];
const MICROS: i64 = 1_000_000;

fn sql(file: &str, table: &str) -> String {
    common::sql("tick_claims", file, table)
}

/// Every generated state: no row, or a row of each shape.
fn states() -> Vec<Db> {
    let mut states = vec![Db { row: None }];
    for tick in [-1, 0] {
        for busy_until in [None, Some(-1), Some(0), Some(1), Some(3)] {
            for owner in 0..2 {
                for token in [1, 3] {
                    for claim_id in [1, 2] {
                        states.push(Db {
                            row: Some(Row {
                                tick,
                                busy_until,
                                owner,
                                token,
                                claim_id,
                            }),
                        });
                    }
                }
            }
        }
    }
    states
}

fn table() -> Table {
    common::table("tick_claims", "diff_ticks", None)
}

/// Sets the table to `db`'s state inside `tx`.
fn set(tx: &mut Transaction<'_>, table: &str, db: &Db) {
    tx.batch_execute(&format!("DELETE FROM {table}")).unwrap();
    if let Some(row) = &db.row {
        tx.execute(
            &format!(
                "INSERT INTO {table} (job_id, tick, busy_until, owner, token, claim_id) VALUES \
                 ('j', now() + $1::int * interval '1 second', \
                 now() + $2::int * interval '1 second', $3, $4, $5)"
            ),
            &[
                &i32::from(row.tick),
                &row.busy_until.map(i32::from),
                &OWNERS[row.owner as usize],
                &i64::from(row.token),
                &i64::from(row.claim_id),
            ],
        )
        .unwrap();
    }
}

/// The table's state as the model sees it, read inside `tx`.
fn get(tx: &mut Transaction<'_>, table: &str) -> Db {
    let row = tx
        .query_opt(
            &format!(
                "SELECT round(extract(epoch FROM tick - now()))::int, \
                 round(extract(epoch FROM busy_until - now()))::int, owner, token, claim_id \
                 FROM {table} WHERE job_id = 'j'"
            ),
            &[],
        )
        .unwrap()
        .map(|r| Row {
            tick: r.get::<_, i32>(0) as Tick,
            busy_until: r.get::<_, Option<i32>>(1).map(|b| b as Tick),
            owner: OWNERS
                .iter()
                .position(|o| *o == r.get::<_, &str>(2))
                .unwrap() as u8,
            token: r.get::<_, i64>(3) as Token,
            claim_id: r.get::<_, Option<i64>>(4).unwrap() as ClaimId,
        });
    Db { row }
}

/// `now()` plus `ticks` seconds, inside `tx`.
fn at(tx: &mut Transaction<'_>, ticks: Tick) -> SystemTime {
    let now: SystemTime = tx.query_one("SELECT now()", &[]).unwrap().get(0);
    let by = Duration::from_secs(u64::from(ticks.unsigned_abs()));
    if ticks >= 0 {
        now + by
    } else {
        now - by
    }
}

type Step = Box<dyn Fn(&mut Db) -> String>;
type Statement<'s> = Box<dyn Fn(&mut Transaction<'_>) -> String + 's>;

/// The claims compared: every tick around now, both owners, both claim ids, leads 0 and 60.
fn claims(claim: &str) -> Vec<(String, Step, Statement<'_>)> {
    let mut steps: Vec<(String, Step, Statement<'_>)> = Vec::new();
    for tick in [-1i8, 0, 1] {
        for owner in 0..2u8 {
            for id in [1u8, 2] {
                for lead in [0i8, 60] {
                    let o = OWNERS[owner as usize];
                    steps.push((
                        format!("claim tick {tick} by {o} id {id} lead {lead}"),
                        Box::new(move |db: &mut Db| {
                            format!(
                                "{:?}",
                                db.claim(
                                    0,
                                    Claim {
                                        tick,
                                        busy: BUSY,
                                        owner,
                                        claim_id: id,
                                        lead,
                                    },
                                    None,
                                )
                            )
                        }),
                        Box::new(move |tx: &mut Transaction<'_>| {
                            let t = at(tx, tick);
                            let row = tx
                                .query_one(
                                    claim,
                                    &[
                                        &"j",
                                        &t,
                                        &(i64::from(BUSY) * MICROS),
                                        &o,
                                        &i64::from(id),
                                        &false,
                                        &(i64::from(lead) * MICROS),
                                    ],
                                )
                                .unwrap();
                            let claimed = Claimed {
                                too_far: row.get(0),
                                token: row.get::<_, Option<i64>>(2).map(|t| t as Token),
                            };
                            format!("{claimed:?}")
                        }),
                    ));
                }
            }
        }
    }
    steps
}

/// extend, release and fence of both owners' tokens 1 and 3.
fn guarded<'s>(
    extend: &'s str,
    release: &'s str,
    fence: &'s str,
) -> Vec<(String, Step, Statement<'s>)> {
    let mut steps: Vec<(String, Step, Statement<'_>)> = Vec::new();
    for owner in 0..2u8 {
        for token in [1u8, 3] {
            let (o, t) = (OWNERS[owner as usize], i64::from(token));
            steps.push((
                format!("extend {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.extend(0, owner, token, BUSY))),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let busy = i64::from(BUSY) * MICROS;
                    let rows = tx.query(extend, &[&"j", &o, &t, &busy]).unwrap();
                    format!("{:?}", !rows.is_empty())
                }),
            ));
            steps.push((
                format!("release {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.release(0, owner, token))),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let rows = tx.query(release, &[&"j", &o, &t]).unwrap();
                    format!("{:?}", !rows.is_empty())
                }),
            ));
            steps.push((
                format!("fence {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.fence(0, owner, token))),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let rows = tx.query(fence, &[&"j", &o, &t]).unwrap();
                    format!("{:?}", !rows.is_empty())
                }),
            ));
        }
    }
    steps
}

#[test]
fn every_tick_claims_statement_does_what_its_model_step_does() {
    let mut table = table();
    let name = table.name.clone();
    let (claim, extend, release, fence) = (
        sql("claim.sql", &name),
        sql("extend.sql", &name),
        sql("release.sql", &name),
        sql("fence.sql", &name),
    );
    let mut steps = claims(&claim);
    steps.extend(guarded(&extend, &release, &fence));
    let mut cases = 0;
    for state in states() {
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
    println!("{cases} statements compared with the model");
}
