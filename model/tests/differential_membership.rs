//! The membership model and the SQL cannot drift apart silently: for generated small states of the
//! processes and units tables (each process row missing or expiring around now, each unit unowned
//! or owned by either process, with or without a token; unit a weighs 1, b 2) and of the token
//! sequence, the statements of `sql/membership/` run against PostgreSQL (rendered for test tables
//! as the library renders them, `pgtenure::testing::render_sql`) and their answers and resulting
//! rows must equal what the model's step functions (the very code the checker runs) give:
//! claim.sql with a weight budget that binds or not ([`Db::claim`]), shed.sql ([`Db::shed`]),
//! heartbeat.sql on rows started long ago, at the settling age, at the beat's `now()` or after it,
//! settled or not ([`Db::heartbeat`]: `lapsed`, `settled`, the row), release.sql ([`Db::release`]),
//! sweep.sql with cutoffs around the rows' expiries and the units' claims ([`Db::sweep`]) and
//! fence.sql for every process, unit and token ([`Db::fence`]). One tick is one second; each state
//! is set in a transaction rolled back afterwards, and each case runs in a savepoint of it.

use pgtenure_model::membership::{Db, Row, Tick, Token, Unit, UNITS, WEIGHTS};
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

/// A process row expiring at `expires_at`, started an hour ago and settled.
fn row(expires_at: Tick) -> Option<Row> {
    Some(Row {
        expires_at,
        started_at: -100,
        settled: true,
    })
}

fn states() -> Vec<Db> {
    let rows = [None, row(-1), row(0), row(2)];
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
                            locked: None,
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

/// The scratch tables of one test (`test` tells the tests of one process apart).
fn tables(test: &str) -> Tables {
    let url = pgtenure::testing::database_url().expect("a database");
    let mut client = Client::connect(&url, NoTls).expect("connect");
    let processes = format!("t_model_mp{test}_{}", std::process::id());
    let units = format!("t_model_mu{test}_{}", std::process::id());
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
        if let Some(row) = row {
            tx.execute(
                &format!(
                    "INSERT INTO {} (process_id, expires_at, hostname, version, started_at, \
                     settled) VALUES ($1::text::uuid, now() + $2::int * interval '1 second', \
                     'h', 'v', now() + $3::int * interval '1 second', $4)",
                    t.processes
                ),
                &[
                    &PIDS[p],
                    &i32::from(row.expires_at),
                    &i32::from(row.started_at),
                    &row.settled,
                ],
            )
            .unwrap();
        }
    }
    for (u, unit) in db.units.iter().enumerate() {
        tx.execute(
            &format!(
                "INSERT INTO {} (tenant, shard, process_id, claimed_at, slot, token, weight) \
                 VALUES ($1, 0, $2::text::uuid, now() + $3::int * interval '1 second', $4, $5, \
                 $6)",
                t.units
            ),
            &[
                &TENANTS[u],
                &unit.owner.map(|p| PIDS[p as usize]),
                &unit.claimed_at.map(i32::from),
                &(u as i32),
                &Some(i64::from(unit.token)).filter(|&t| t > 0),
                &i32::from(WEIGHTS[u]),
            ],
        )
        .unwrap();
    }
    set_sequence(tx, t, db.seq);
}

/// The token sequence's next value: `seq`. Sequences are not transactional: a claim's draws
/// survive the rollback of its savepoint, so every claim sets it before and after.
fn set_sequence(tx: &mut Transaction<'_>, t: &Names, seq: Token) {
    tx.query(
        &format!("SELECT setval('{}_token_seq', $1, false)", t.units),
        &[&i64::from(seq)],
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
    let mut tables = tables("c");
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
        let mut tx = tables.client.transaction().unwrap();
        set(&mut tx, &t, &state);
        for p in 0..2u8 {
            for budget in [1, 3] {
                claim_case(&mut tx, &t, &claim, &state, p, budget);
                compared += 1;
            }
            for u in 0..UNITS {
                shed_case(&mut tx, &t, &shed, &state, p, u);
                compared += 1;
            }
        }
        tx.rollback().unwrap();
    }
    println!("{compared} statements compared with the model");
}

/// claim.sql by process `p` in `state`, every unit and `budget` weight at most.
fn claim_case(
    outer: &mut Transaction<'_>,
    t: &Names,
    claim: &Statement,
    state: &Db,
    p: u8,
    budget: u8,
) {
    let mut model = state.clone();
    let mut claimed = model.claim(0, p, UNITS, budget);
    claimed.sort();
    let mut tx = outer.transaction().unwrap();
    set_sequence(&mut tx, t, state.seq);
    let rows = tx
        .query(
            claim,
            &[
                &PIDS[p as usize] as &(dyn ToSql + Sync),
                &2i32,
                &i64::from(budget),
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
    set_sequence(outer, t, state.seq);
    // The order in which the UPDATE draws the new tokens is the plan's: the model draws
    // them in candidate order. Compared: the units claimed, the owners, the sequence, and
    // that every new token is above the unit's old one and drawn by this statement.
    let units = |claimed: &[(usize, Token)]| claimed.iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(
        units(&answer),
        units(&claimed),
        "claim of {budget} by {p} in {state:?}"
    );
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
fn shed_case(
    outer: &mut Transaction<'_>,
    t: &Names,
    shed: &Statement,
    state: &Db,
    p: u8,
    u: usize,
) {
    let mut model = state.clone();
    let given = model.shed(0, p, &[u]);
    let mut tx = outer.transaction().unwrap();
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

/// The process rows as the model sees them (times in whole seconds from now).
fn get_rows(tx: &mut Transaction<'_>, t: &Names) -> Vec<Option<Row>> {
    PIDS.iter()
        .map(|pid| {
            tx.query_opt(
                &format!(
                    "SELECT extract(epoch FROM expires_at - now())::int, \
                     extract(epoch FROM started_at - now())::int, settled \
                     FROM {} WHERE process_id = $1::text::uuid",
                    t.processes
                ),
                &[pid],
            )
            .unwrap()
            .map(|r| Row {
                expires_at: r.get::<_, i32>(0) as Tick,
                started_at: r.get::<_, i32>(1) as Tick,
                settled: r.get(2),
            })
        })
        .collect()
}

/// The rows of process 0 a heartbeat may find: none, or expired, expiring now or live; started
/// long ago, just as old as the settling age, at the beat's `now()`, or a tick after it (a beat
/// sent before the one that inserted the row); settled or not.
fn beating_rows() -> Vec<Option<Row>> {
    let mut rows = vec![None];
    for expires_at in [-1, 0, 2, 5] {
        for started_at in [-100, -2, 0, 1] {
            for settled in [false, true] {
                rows.push(Some(Row {
                    expires_at,
                    started_at,
                    settled,
                }));
            }
        }
    }
    rows
}

#[test]
fn heartbeat_release_sweep_and_fence_match_the_model() {
    let mut tables = tables("h");
    let t = Names {
        processes: tables.processes.clone(),
        units: tables.units.clone(),
    };
    let both = [
        ("units", t.units.as_str()),
        ("processes", t.processes.as_str()),
    ];
    let prepare = |client: &mut Client, file: &str, types: &[Type]| {
        client
            .prepare_typed(&render(file, &both), types)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
    };
    let heartbeat = prepare(
        &mut tables.client,
        "heartbeat.sql",
        &[
            Type::TEXT,
            Type::INT8,
            Type::INT4,
            Type::INT8,
            Type::TEXT,
            Type::TEXT,
            Type::BOOL,
            Type::BOOL,
            Type::INT8,
        ],
    );
    let release = prepare(
        &mut tables.client,
        "release.sql",
        &[
            Type::TEXT,
            Type::TEXT_ARRAY,
            Type::INT4_ARRAY,
            Type::INT4,
            Type::INT8,
        ],
    );
    let sweep = prepare(&mut tables.client, "sweep.sql", &[Type::INT8]);
    let fence = prepare(
        &mut tables.client,
        "fence.sql",
        &[Type::TEXT, Type::TEXT, Type::INT4, Type::INT8],
    );
    let mut compared = 0;
    for own in beating_rows() {
        for settle_after in [0, 2] {
            let state = Db {
                processes: vec![own, row(2)],
                ..Db::new(2)
            };
            let mut tx = tables.client.transaction().unwrap();
            set(&mut tx, &t, &state);
            heartbeat_case(&mut tx, &t, &heartbeat, &state, settle_after);
            tx.rollback().unwrap();
            compared += 1;
        }
    }
    for state in states().into_iter().filter(|state| state.seq == 1) {
        let mut tx = tables.client.transaction().unwrap();
        set(&mut tx, &t, &state);
        for p in 0..2u8 {
            release_case(&mut tx, &t, &release, &state, p);
            compared += 1;
        }
        for cutoff in [-1, 0, 1, 5, 6] {
            sweep_case(&mut tx, &t, &sweep, &state, cutoff);
            compared += 1;
        }
        compared += fence_cases(&mut tx, &fence, &state);
        tx.rollback().unwrap();
    }
    println!("{compared} statements compared with the model");
}

/// heartbeat.sql of process 0 (TTL 2 ticks, with probation) in `state`.
fn heartbeat_case(
    outer: &mut Transaction<'_>,
    t: &Names,
    beat: &Statement,
    state: &Db,
    settle: Tick,
) {
    let mut model = state.clone();
    let (lapsed, settled) = model.heartbeat(0, 0, 2, settle);
    let mut tx = outer.transaction().unwrap();
    let answer = tx
        .query_one(
            beat,
            &[
                &PIDS[0] as &(dyn ToSql + Sync),
                &2_000_000i64,
                &0i32,
                &0i64,
                &"h",
                &"v",
                &false,
                &false,
                &(i64::from(settle) * 1_000_000),
            ],
        )
        .unwrap();
    let rows = get_rows(&mut tx, t);
    tx.rollback().unwrap();
    let what = format!("heartbeat settling after {settle} in {state:?}");
    assert_eq!(
        (answer.get::<_, bool>(0), answer.get::<_, bool>(2)),
        (lapsed, settled),
        "{what}"
    );
    assert_eq!(rows, model.processes, "{what}");
}

/// release.sql of process `p`, keeping nothing, in `state`.
fn release_case(outer: &mut Transaction<'_>, t: &Names, release: &Statement, state: &Db, p: u8) {
    let mut model = state.clone();
    let given = model.release(p);
    let mut tx = outer.transaction().unwrap();
    let empty: Vec<&str> = Vec::new();
    let rows = tx
        .query(
            release,
            &[
                &PIDS[p as usize] as &(dyn ToSql + Sync),
                &empty,
                &Vec::<i32>::new(),
                &0i32,
                &0i64,
            ],
        )
        .unwrap();
    let mut answer: Vec<usize> = rows
        .iter()
        .map(|r| {
            TENANTS
                .iter()
                .position(|x| *x == r.get::<_, String>(0))
                .unwrap()
        })
        .collect();
    answer.sort();
    let after = get(&mut tx, t);
    tx.rollback().unwrap();
    assert_eq!(answer, given, "release by {p} in {state:?}");
    assert_eq!(
        after,
        (model_units(&model), model.seq),
        "release by {p} in {state:?}"
    );
}

/// sweep.sql with `cutoff` in `state`.
fn sweep_case(outer: &mut Transaction<'_>, t: &Names, sweep: &Statement, state: &Db, cutoff: Tick) {
    let mut model = state.clone();
    let (processes, units) = model.sweep(0, cutoff);
    let mut tx = outer.transaction().unwrap();
    let answer = tx
        .query_one(sweep, &[&(i64::from(cutoff) * 1_000_000)])
        .unwrap();
    let rows = get_rows(&mut tx, t);
    let after = get(&mut tx, t);
    tx.rollback().unwrap();
    let what = format!("sweep with cutoff {cutoff} in {state:?}");
    assert_eq!(
        (answer.get::<_, i64>(0), answer.get::<_, i64>(1)),
        (processes as i64, units as i64),
        "{what}"
    );
    assert_eq!(rows, model.processes, "{what}");
    assert_eq!(after, (model_units(&model), model.seq), "{what}");
}

/// fence.sql for every process, unit and token (the unit's, one below and one above) in `state`,
/// in one transaction (a fence writes nothing): how many were compared.
fn fence_cases(outer: &mut Transaction<'_>, fence: &Statement, state: &Db) -> usize {
    let mut tx = outer.transaction().unwrap();
    let mut compared = 0;
    for p in 0..2u8 {
        for (u, tenant) in TENANTS.iter().enumerate() {
            for token in [1, 2, 3] {
                let rows = tx
                    .query(
                        fence,
                        &[
                            &PIDS[p as usize] as &(dyn ToSql + Sync),
                            tenant,
                            &0i32,
                            &i64::from(token),
                        ],
                    )
                    .unwrap();
                let admitted = rows.first().is_some_and(|r| r.get::<_, bool>(0));
                assert_eq!(
                    admitted,
                    state.fence(0, p, u, token),
                    "fence of {u} by {p} with {token} in {state:?}"
                );
                compared += 1;
            }
        }
    }
    tx.rollback().unwrap();
    compared
}

/// With one unit's row held `FOR SHARE` by another connection's open transaction (a fenced write
/// in progress, fence.sql), claim.sql, shed.sql and sweep.sql skip it as the model's steps do
/// ([`Db::locked`]), and release.sql waits for it exactly when the model's release waits (it
/// names a unit of the releasing process): with a short lock timeout it then fails with
/// `lock_not_available`. Each state is committed, since the holder must see its rows.
#[test]
fn a_fenced_unit_is_skipped_or_waited_for_as_the_model_says() {
    let mut tables = tables("l");
    let t = Names {
        processes: tables.processes.clone(),
        units: tables.units.clone(),
    };
    let both = [
        ("units", t.units.as_str()),
        ("processes", t.processes.as_str()),
    ];
    let url = pgtenure::testing::database_url().expect("a database");
    let mut holder = Client::connect(&url, NoTls).expect("connect");
    let prepare = |client: &mut Client, file: &str, types: &[Type]| {
        client
            .prepare_typed(&render(file, &both), types)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
    };
    let claim = prepare(
        &mut tables.client,
        "claim.sql",
        &[
            Type::TEXT,
            Type::INT4,
            Type::INT8,
            Type::INT4,
            Type::INT4,
            Type::INT8,
            Type::BOOL,
        ],
    );
    let giving = [
        Type::TEXT,
        Type::TEXT_ARRAY,
        Type::INT4_ARRAY,
        Type::INT4,
        Type::INT8,
    ];
    let shed = prepare(&mut tables.client, "shed.sql", &giving);
    let release = prepare(&mut tables.client, "release.sql", &giving);
    let sweep = prepare(&mut tables.client, "sweep.sql", &[Type::INT8]);
    let lock = format!("SELECT 1 FROM {} WHERE tenant = $1 FOR SHARE", t.units);
    let mut compared = 0;
    for state in states().into_iter().filter(|state| state.seq == 1) {
        let mut tx = tables.client.transaction().unwrap();
        tx.batch_execute("SET LOCAL synchronous_commit = off")
            .unwrap();
        set(&mut tx, &t, &state);
        tx.commit().unwrap();
        for (u, tenant) in TENANTS.iter().enumerate() {
            let mut hold = holder.transaction().unwrap();
            assert_eq!(hold.query(&lock, &[tenant]).unwrap().len(), 1);
            let locked = Db {
                locked: Some(u),
                ..state.clone()
            };
            let mut tx = tables.client.transaction().unwrap();
            // The lock is held until `hold` ends: any timeout shows the wait.
            tx.batch_execute("SET LOCAL lock_timeout = '1ms'").unwrap();
            for p in 0..2u8 {
                claim_case(&mut tx, &t, &claim, &locked, p, 3);
                shed_case(&mut tx, &t, &shed, &locked, p, u);
                if locked.units[u].owner == Some(p) {
                    release_waits(&mut tx, &release, p);
                } else {
                    release_case(&mut tx, &t, &release, &locked, p);
                }
                compared += 3;
            }
            // The rows' times were set at the commit's now(), a little before this transaction's:
            // cutoffs that put no row exactly at the boundary.
            for cutoff in [-1, 3, 6] {
                sweep_case(&mut tx, &t, &sweep, &locked, cutoff);
                compared += 1;
            }
            tx.rollback().unwrap();
            hold.rollback().unwrap();
        }
    }
    println!("{compared} statements compared with the model, a unit locked");
}

/// release.sql of process `p` waits for the locked unit: it fails on the lock timeout.
fn release_waits(outer: &mut Transaction<'_>, release: &Statement, p: u8) {
    let mut tx = outer.transaction().unwrap();
    let empty: Vec<&str> = Vec::new();
    let error = tx
        .query(
            release,
            &[
                &PIDS[p as usize] as &(dyn ToSql + Sync),
                &empty,
                &Vec::<i32>::new(),
                &0i32,
                &0i64,
            ],
        )
        .expect_err("release.sql waits for the locked unit");
    assert_eq!(
        error.code(),
        Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "release by {p}: {error}"
    );
    tx.rollback().unwrap();
}
