//! The semaphores model and the SQL cannot drift apart silently: for generated small states of a
//! key's slots (no row, or a row of some owner, token and held_until relative to now, in slots 0 to
//! 2) and of the token sequence, `sql/semaphores/acquire.sql` (asking for 1 or 2 permits) and the
//! lease statements a permit renews, releases and fences with (`sql/leases/renew_tenure.sql`,
//! `release.sql`, `fence.sql`) run against PostgreSQL on a semaphore table, and their answers and
//! resulting rows must equal what the model's step functions ([`Db`]'s methods) give. One tick is
//! one second; each case runs in a transaction rolled back afterwards, so `now()` is one instant for
//! the set-up, the statement and the read.

use pgtenure_model::semaphores::{Db, Row, Slot, Tick, Token};
use postgres::Transaction;

mod common;

const TTL: Tick = 2;
const OWNERS: [&str; 2] = ["a", "b"];
const SLOTS: usize = 3;
const MICROS: i64 = 1_000_000;

/// Every generated state: each of 3 slots without a row or with one of three rows (lapsed before
/// now, lapsed at now, live), slot s's token 2s + 1, the sequence behind or ahead of the tokens.
fn states() -> Vec<Db> {
    let choices: [Option<(u8, Tick)>; 4] = [None, Some((0, -1)), Some((1, 0)), Some((0, 1))];
    let mut states = Vec::new();
    for a in choices {
        for b in choices {
            for c in choices {
                for seq in [2, 9] {
                    let rows = [a, b, c]
                        .iter()
                        .enumerate()
                        .map(|(slot, row)| {
                            row.map(|(owner, held_until)| Row {
                                owner,
                                token: 2 * slot as Token + 1,
                                held_until,
                            })
                        })
                        .collect();
                    states.push(Db { rows, seq });
                }
            }
        }
    }
    states
}

/// Sets the table to `db`'s state inside `tx`.
fn set(tx: &mut Transaction<'_>, table: &str, db: &Db) {
    tx.batch_execute(&format!("DELETE FROM {table}")).unwrap();
    for (slot, row) in db.rows.iter().enumerate() {
        let Some(row) = row else { continue };
        tx.execute(
            &format!(
                "INSERT INTO {table} (key, slot, owner, held_until, token, superseded, \
                 acquired_at, managed_token) VALUES ('k', $1, $2, now() + $3::int * interval \
                 '1 second', $4, false, now(), $4)"
            ),
            &[
                &(slot as i32),
                &OWNERS[row.owner as usize],
                &i32::from(row.held_until),
                &i64::from(row.token),
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

/// The table's state as the model sees it, read inside `tx`; every row must still be a managed
/// tenure (managed_token = token) that is not superseded.
fn get(tx: &mut Transaction<'_>, table: &str) -> Db {
    let mut rows = vec![None; SLOTS];
    for r in tx
        .query(
            &format!(
                "SELECT slot, owner, token, round(extract(epoch FROM held_until - now()))::int, \
                 managed_token = token AND NOT superseded FROM {table} WHERE key = 'k'"
            ),
            &[],
        )
        .unwrap()
    {
        assert!(r.get::<_, bool>(4), "a permit's row not a managed tenure");
        let owner = OWNERS
            .iter()
            .position(|o| *o == r.get::<_, &str>(1))
            .unwrap() as u8;
        rows[r.get::<_, i32>(0) as usize] = Some(Row {
            owner,
            token: r.get::<_, i64>(2) as Token,
            held_until: r.get::<_, i32>(3) as Tick,
        });
    }
    let seq = tx
        .query_one(
            &format!("SELECT last_value, is_called FROM {table}_token_seq"),
            &[],
        )
        .unwrap();
    let (last, called): (i64, bool) = (seq.get(0), seq.get(1));
    Db {
        rows,
        seq: (if called { last + 1 } else { last }) as Token,
    }
}

type Step = Box<dyn Fn(&mut Db) -> String>;
type Run<'s> = Box<dyn Fn(&mut Transaction<'_>) -> String + 's>;

#[test]
fn every_statement_a_permit_sends_does_what_its_model_step_does() {
    let mut table = common::table("semaphores", "sdiff", Some("token_seq"));
    let name = table.name.clone();
    let acquire = common::sql("semaphores", "acquire.sql", &name);
    let renew = common::sql("leases", "renew_tenure.sql", &name);
    let release = common::sql("leases", "release.sql", &name);
    let fence = common::sql("leases", "fence.sql", &name);
    let (acquire, renew, release, fence) = (&acquire, &renew, &release, &fence);
    let ttl = i64::from(TTL) * MICROS;
    let none_ts: Option<std::time::SystemTime> = None;
    let none_i64: Option<i64> = None;
    let mut steps: Vec<(String, Step, Run<'_>)> = Vec::new();
    for permits in [1 as Slot, 2] {
        steps.push((
            format!("acquire a of {permits}"),
            Box::new(move |db: &mut Db| format!("{:?}", db.acquire(0, 0, TTL, permits))),
            Box::new(move |tx: &mut Transaction<'_>| {
                let params: [&(dyn postgres::types::ToSql + Sync); 9] = [
                    &"k",
                    &"a",
                    &ttl,
                    &i32::from(permits),
                    &false,
                    &false,
                    &none_i64,
                    &none_ts,
                    &none_ts,
                ];
                let rows = tx.query(acquire, &params).unwrap();
                assert!(rows.len() <= 1, "{} rows", rows.len());
                let granted = rows.first().and_then(|r| {
                    let slot: Option<i32> = r.get(0);
                    let token: Option<i64> = r.get(1);
                    Some((slot? as Slot, token? as Token))
                });
                let contended = rows.first().is_some_and(|r| r.get::<_, bool>(3));
                format!("{:?}", (granted, contended))
            }),
        ));
    }
    for owner in 0..2u8 {
        let o = OWNERS[owner as usize];
        for token in [1u8, 3] {
            let t = i64::from(token);
            steps.push((
                format!("renew {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.renew_tenure(0, owner, token, TTL))),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let rows = tx.query(renew, &[&"k", &o, &t, &ttl, &none_i64]).unwrap();
                    format!("{:?}", !rows.is_empty())
                }),
            ));
            steps.push((
                format!("release {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.release(0, owner, token))),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let row = tx
                        .query_one(release, &[&"k", &o, &Some(t), &Some("pgtenure:model")])
                        .unwrap();
                    format!("{:?}", row.get::<_, bool>(0))
                }),
            ));
            steps.push((
                format!("fence {o} {token}"),
                Box::new(move |db: &mut Db| format!("{:?}", db.fence(0, owner, token).is_some())),
                Box::new(move |tx: &mut Transaction<'_>| {
                    let rows = tx.query(fence, &[&"k", &o, &t]).unwrap();
                    format!("{:?}", !rows.is_empty())
                }),
            ));
        }
    }
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
