//! The membership model and the SQL cannot drift apart silently: for generated small states of the
//! processes and units tables (each process row missing or expiring around now, each unit unowned
//! or owned by either process, with or without a token) and of the token sequence, claim.sql and
//! shed.sql of `sql/membership/` run against PostgreSQL (rendered for test tables as the library
//! renders them, `pgtenure::testing::render_sql`) and their answers and resulting rows must equal
//! what the model's step functions ([`Db::claim`], [`Db::shed`], the very code the checker runs)
//! give. One tick is one second; each case runs in a transaction rolled back afterwards. The other
//! modelled statements (heartbeat, release, sweep, fence) are not compared yet.

use pgtenure_model::membership::{Db, Token, Unit, UNITS};
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Statement, Transaction};

const PIDS: [&str; 2] = [
    "00000000-0000-0000-0000-000000000001",
    "00000000-0000-0000-0000-000000000002",
];
const TENANTS: [&str; UNITS] = ["a", "b"];

fn render(file: &str, tables: &[(&str, &str)]) -> String {
    let path = format!("{}/../sql/membership/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    pgtenure::testing::render_sql(&text, tables).expect("plain table names")
}

fn states() -> Vec<Db> {
    let rows = [None, Some(-1), Some(0), Some(2)];
    let units = [
        Unit::default(),
        Unit {
            owner: None,
            token: 2,
            claimed_at: None,
        },
        Unit {
            owner: Some(0),
            token: 2,
            claimed_at: Some(-5),
        },
        Unit {
            owner: Some(1),
            token: 2,
            claimed_at: Some(-5),
        },
    ];
    let mut states = Vec::new();
    for p0 in rows {
        for p1 in rows {
            for u0 in &units {
                for u1 in &units {
                    for seq in [1, 4] {
                        states.push(Db {
                            processes: vec![p0, p1],
                            units: [u0.clone(), u1.clone()],
                            seq,
                        });
                    }
                }
            }
        }
    }
    states
}

/// The test tables' names.
#[derive(Clone)]
struct Names {
    processes: String,
    units: String,
}

struct Tables {
    processes: String,
    units: String,
    client: Client,
}

impl Drop for Tables {
    fn drop(&mut self) {
        let _ = self.client.batch_execute(&format!(
            "DROP TABLE IF EXISTS {}; DROP TABLE IF EXISTS {}",
            self.processes, self.units
        ));
    }
}

fn tables() -> Tables {
    let url = pgtenure::testing::database_url().expect("a database");
    let mut client = Client::connect(&url, NoTls).expect("connect");
    let processes = format!("t_model_mp_{}", std::process::id());
    let units = format!("t_model_mu_{}", std::process::id());
    for (file, table) in [
        ("create_processes.sql", &processes),
        ("create_units.sql", &units),
        ("create_sequence.sql", &units),
    ] {
        client
            .batch_execute(&render(file, &[("table", table)]))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    Tables {
        processes,
        units,
        client,
    }
}

fn set(tx: &mut Transaction<'_>, t: &Names, db: &Db) {
    tx.batch_execute(&format!(
        "DELETE FROM {}; DELETE FROM {}",
        t.processes, t.units
    ))
    .unwrap();
    for (p, row) in db.processes.iter().enumerate() {
        if let Some(expires_at) = row {
            tx.execute(
                &format!(
                    "INSERT INTO {} (process_id, expires_at, hostname, version, started_at) \
                     VALUES ($1::text::uuid, now() + $2::int * interval '1 second', 'h', 'v', \
                     now() - interval '1 hour')",
                    t.processes
                ),
                &[&PIDS[p], &i32::from(*expires_at)],
            )
            .unwrap();
        }
    }
    for (u, unit) in db.units.iter().enumerate() {
        tx.execute(
            &format!(
                "INSERT INTO {} (tenant, shard, process_id, claimed_at, slot, token) VALUES \
                 ($1, 0, $2::text::uuid, now() + $3::int * interval '1 second', $4, $5)",
                t.units
            ),
            &[
                &TENANTS[u],
                &unit.owner.map(|p| PIDS[p as usize]),
                &unit.claimed_at.map(i32::from),
                &(u as i32),
                &Some(i64::from(unit.token)).filter(|&t| t > 0),
            ],
        )
        .unwrap();
    }
    tx.query(
        &format!("SELECT setval('{}_token_seq', $1, false)", t.units),
        &[&i64::from(db.seq)],
    )
    .unwrap();
}

/// The owners and tokens of the units, and the sequence, as the model sees them.
fn get(tx: &mut Transaction<'_>, t: &Names) -> (Vec<(Option<u8>, Token)>, Token) {
    let rows = tx
        .query(
            &format!(
                "SELECT process_id::text, coalesce(token, 0) FROM {} ORDER BY tenant",
                t.units
            ),
            &[],
        )
        .unwrap();
    let units = rows
        .iter()
        .map(|r| {
            let owner: Option<String> = r.get(0);
            let owner = owner.map(|o| PIDS.iter().position(|p| *p == o).unwrap() as u8);
            (owner, r.get::<_, i64>(1) as Token)
        })
        .collect();
    let seq = tx
        .query_one(
            &format!("SELECT last_value, is_called FROM {}_token_seq", t.units),
            &[],
        )
        .unwrap();
    let last: i64 = seq.get(0);
    let seq = if seq.get::<_, bool>(1) {
        last + 1
    } else {
        last
    };
    (units, seq as Token)
}

fn model_units(db: &Db) -> Vec<(Option<u8>, Token)> {
    db.units.iter().map(|u| (u.owner, u.token)).collect()
}

#[test]
fn claim_and_shed_match_the_model() {
    let mut tables = tables();
    let t = Names {
        processes: tables.processes.clone(),
        units: tables.units.clone(),
    };
    let both = [
        ("units", t.units.as_str()),
        ("processes", t.processes.as_str()),
    ];
    let claim = tables
        .client
        .prepare_typed(
            &render("claim.sql", &both),
            &[
                Type::TEXT,
                Type::INT4,
                Type::INT8,
                Type::INT4,
                Type::INT4,
                Type::INT8,
                Type::BOOL,
            ],
        )
        .unwrap();
    let shed = tables
        .client
        .prepare_typed(
            &render("shed.sql", &both),
            &[
                Type::TEXT,
                Type::TEXT_ARRAY,
                Type::INT4_ARRAY,
                Type::INT4,
                Type::INT8,
            ],
        )
        .unwrap();
    let mut compared = 0;
    for state in states() {
        for p in 0..2u8 {
            claim_case(&mut tables.client, &t, &claim, &state, p);
            compared += 1;
            for u in 0..UNITS {
                shed_case(&mut tables.client, &t, &shed, &state, p, u);
                compared += 1;
            }
        }
    }
    println!("{compared} statements compared with the model");
}

/// claim.sql by process `p` in `state`, every unit at most (the weight budget never binds).
fn claim_case(client: &mut Client, t: &Names, claim: &Statement, state: &Db, p: u8) {
    // claim.sql, every unit at most (the weight budget never binds).
    let mut model = state.clone();
    let mut claimed = model.claim(0, p, UNITS);
    claimed.sort();
    let mut tx = client.transaction().unwrap();
    set(&mut tx, t, state);
    let rows = tx
        .query(
            claim,
            &[
                &PIDS[p as usize] as &(dyn ToSql + Sync),
                &2i32,
                &100i64,
                &0i32,
                &0i32,
                &0i64,
                &false,
            ],
        )
        .unwrap();
    let mut answer: Vec<(usize, Token)> = rows
        .iter()
        .map(|r| {
            let tenant: String = r.get(0);
            let u = TENANTS.iter().position(|x| *x == tenant).unwrap();
            (u, r.get::<_, i64>(3) as Token)
        })
        .collect();
    answer.sort();
    let after = get(&mut tx, t);
    tx.rollback().unwrap();
    // The order in which the UPDATE draws the new tokens is the plan's: the model draws
    // them in candidate order. Compared: the units claimed, the owners, the sequence, and
    // that every new token is above the unit's old one and drawn by this statement.
    let units = |claimed: &[(usize, Token)]| claimed.iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(units(&answer), units(&claimed), "claim by {p} in {state:?}");
    for &(u, token) in &answer {
        assert!(
            token > state.units[u].token && token >= state.seq,
            "claim by {p} in {state:?}"
        );
    }
    let owners = |units: &[(Option<u8>, Token)]| units.iter().map(|u| u.0).collect::<Vec<_>>();
    assert_eq!(
        owners(&after.0),
        owners(&model_units(&model)),
        "claim by {p} in {state:?}"
    );
    assert_eq!(after.1, model.seq, "claim by {p} in {state:?}");
}

/// shed.sql of unit `u` by process `p` in `state`.
fn shed_case(client: &mut Client, t: &Names, shed: &Statement, state: &Db, p: u8, u: usize) {
    let mut model = state.clone();
    let given = model.shed(0, p, &[u]);
    let mut tx = client.transaction().unwrap();
    set(&mut tx, t, state);
    let rows = tx
        .query(
            shed,
            &[
                &PIDS[p as usize] as &(dyn ToSql + Sync),
                &vec![TENANTS[u]],
                &vec![0i32],
                &0i32,
                &0i64,
            ],
        )
        .unwrap();
    let answer: Vec<usize> = rows
        .iter()
        .map(|r| {
            TENANTS
                .iter()
                .position(|x| *x == r.get::<_, String>(0))
                .unwrap()
        })
        .collect();
    let after = get(&mut tx, t);
    tx.rollback().unwrap();
    assert_eq!(answer, given, "shed {u} by {p} in {state:?}");
    assert_eq!(
        after,
        (model_units(&model), model.seq),
        "shed {u} by {p} in {state:?}"
    );
}
