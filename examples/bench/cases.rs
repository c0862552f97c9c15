//! The operations compared with pgbench: how the library runs each, the pgbench script running its
//! statement, and the fixtures they need (rows held by others, leaders, live processes).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use pgtenure::membership::{Leaser, Unit, Units};
use pgtenure::postgres::{types::Type, Client, NoTls};
use pgtenure::testing::render_sql;
use pgtenure::{
    elector::Elector, fire_claims::FireClaims, leases::Leases, semaphores::Semaphore,
    tick_claims::TickClaims, Db, StatementMode,
};

use super::common::Quiet;
use super::pgbench::{Arg, Script, Step};
use super::Error;

/// The promotion record's timeline as the grant statements take it: the bench's server was never
/// promoted (on one that was, won grants would be answered `stale` and refused).
const TIMELINE: Arg = Arg::Lit("1");

/// The `-D` variables of pgbench client `n` for the refused permit: a key whose two permits are
/// held by others.
fn permit_vars(n: usize) -> Vec<(String, String)> {
    vars(&[
        ("key", "full".into()),
        ("owner", format!("pgb-{n}")),
        ("ttl", "30000000".into()),
        ("permits", "2".into()),
    ])
}

/// The parameter types of `sql/semaphores/acquire.sql`, as the library binds them.
pub const PERMIT_TYPES: [Type; 9] = [
    Type::TEXT,
    Type::TEXT,
    Type::INT8,
    Type::INT4,
    Type::BOOL,
    Type::BOOL,
    Type::INT8,
    Type::TIMESTAMPTZ,
    Type::TIMESTAMPTZ,
];

/// Makes one client's operation: given the pool, the client's number and the measurement's number
/// (for keys of its own), returns what one iteration does.
pub type MakeOp = Box<dyn Fn(&Db, usize, u64) -> Box<dyn FnMut(u64) + Send> + Sync>;

/// One operation: how the library runs it, and the pgbench script running its statement.
pub struct Case {
    pub name: &'static str,
    pub lib: MakeOp,
    pub script: Script,
    /// The `-D` variables of pgbench client `n`.
    pub vars: Box<dyn Fn(usize) -> Vec<(String, String)>>,
}

/// The tables the comparison runs on, created by the library.
pub struct Tables {
    pub tick: String,
    pub fire: String,
    pub lease: String,
    pub leader: String,
    pub procs: String,
    pub units: String,
    pub sema: String,
}

impl Tables {
    /// Drops every table and sequence the cases made.
    pub fn drop_all(&self, url: &str) -> Result<(), Error> {
        let mut admin = pgtenure::postgres::Client::connect(url, pgtenure::postgres::NoTls)?;
        for table in [
            &self.tick,
            &self.fire,
            &self.lease,
            &self.leader,
            &self.units,
            &self.procs,
            &self.sema,
        ] {
            admin.batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
        }
        admin.batch_execute(&format!(
            "DROP SEQUENCE IF EXISTS \"{0}_token_seq\", \"{1}_term_seq\", \"{2}_token_seq\";
             DROP TABLE IF EXISTS \"{0}_promotion\", \"{1}_promotion\", \"{2}_promotion\"",
            self.lease, self.leader, self.sema
        ))?;
        Ok(())
    }
}

fn file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/sql/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("sql/{path}: {e}"))
}

pub fn sql(path: &str, tables: &[(&str, &str)]) -> String {
    render_sql(&file(path), tables).expect("valid table names")
}

fn vars(list: &[(&str, String)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// The cases, the tables they run on, and the live processes the membership cases use.
pub type Fixture = (Vec<Case>, Tables, Vec<Arc<Leaser>>);

/// A pool of 16 in `Auto` with the defaults (each thread keeps its connection), and the cases
/// `PGTENURE_BENCH_CASES` keeps (every one when it is unset), made through it.
pub fn kept_cases(url: &str) -> Result<(Db, Fixture), Error> {
    let db = Db::builder(url)?
        .max_size(16)?
        .statement_mode(StatementMode::Auto)
        .build()?;
    let (mut cases, tables, leasers) = cases(&db, std::process::id())?;
    if let Ok(filter) = std::env::var("PGTENURE_BENCH_CASES") {
        cases.retain(|case| filter.split(',').any(|f| case.name.contains(f)));
    }
    Ok((db, (cases, tables, leasers)))
}

pub fn cases(db: &Db, id: u32) -> Result<Fixture, Error> {
    let t = Tables {
        tick: format!("bench_tick_{id}"),
        fire: format!("bench_fire_{id}"),
        lease: format!("bench_lease_{id}"),
        leader: format!("bench_leader_{id}"),
        procs: format!("bench_procs_{id}"),
        units: format!("bench_units_{id}"),
        sema: format!("bench_sema_{id}"),
    };
    TickClaims::new(db).with_table(&t.tick)?.create_table()?;
    FireClaims::new(db).with_table(&t.fire)?.create_table()?;
    Leases::new(db).with_table(&t.lease)?.create_table()?;
    Elector::new(db).with_table(&t.leader)?.create_table()?;
    Semaphore::new(db).with_table(&t.sema)?.create_table()?;
    // Both permits of the key "full" held by others for an hour (rows as a holder's acquire leaves
    // them: a managed permit would need a thread kept alive through the whole comparison).
    db.connection()?.batch_execute(&format!(
        "INSERT INTO \"{0}\" (key, slot, owner, held_until, token, acquired_at, managed_token)
         SELECT 'full', slot, 'other', now() + interval '1 hour', nextval('\"{0}_token_seq\"'),
                now(), currval('\"{0}_token_seq\"')
           FROM generate_series(0, 1) AS slot",
        t.sema
    ))?;
    let units = Units::new(db).with_tables(&t.procs, &t.units)?;
    units.create_tables()?;
    let all: Vec<Unit> = (0..1000)
        .map(|i| Unit::new(&format!("tenant-{}", i % 10), i).unwrap())
        .collect();
    units.add(&all)?;

    // Fixtures: a tick claimed for an hour, a fire key claimed, a lease and a fleet held by others.
    let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let iso_taken = "2025-06-15T15:06:40Z".to_owned();
    TickClaims::new(db).with_table(&t.tick)?.claim(
        "contended",
        taken,
        Duration::from_secs(3600),
    )?;
    let fires = FireClaims::new(db)
        .with_table(&t.fire)?
        .with_ttl(Duration::from_secs(3600))?;
    fires.claim("hot@1")?;
    let other = Leases::new(db).with_table(&t.lease)?.with_owner("other")?;
    other.try_acquire("held", Duration::from_secs(3600))?;
    Elector::new(db)
        .with_table(&t.leader)?
        .with_name("followed")?
        .with_holder("other")?
        .with_ttl(Duration::from_secs(3600))?
        .is_leader()?;
    // Keys each renewing client holds (1 and 100), for the library's threads and pgbench's clients.
    let hold = |owner: &str, keys: &[String]| -> Result<(), Error> {
        let leases = Leases::new(db).with_table(&t.lease)?.with_owner(owner)?;
        for key in keys {
            leases.try_acquire(key, Duration::from_secs(3600))?;
        }
        Ok(())
    };
    let renew_keys = |side: &str, n: usize, size: usize| -> Vec<String> {
        (0..size)
            .map(|j| format!("{side}-renew{size}-{n}-{j}"))
            .collect()
    };
    let mut leader_terms = Vec::new();
    for n in 0..8 {
        for size in [1, 100] {
            hold(&format!("lib-{n}"), &renew_keys("lib", n, size))?;
            hold(&format!("pgb-{n}"), &renew_keys("pgb", n, size))?;
        }
        let pgb_leader = Elector::new(db)
            .with_table(&t.leader)?
            .with_name(&format!("pgb-lead-{n}"))?
            .with_holder(&format!("pgb-{n}"))?
            .with_ttl(Duration::from_secs(3600))?;
        assert!(pgb_leader.is_leader()?);
        leader_terms.push(pgb_leader.term().unwrap());
    }
    // Eight live processes sharing the units, settled.
    let mut config = super::common::hand_driven();
    config.ttl = Duration::from_secs(600);
    config.heartbeat_interval = Duration::from_secs(60);
    let leasers: Vec<Arc<Leaser>> = (0..8)
        .map(|_| {
            Leaser::new(db, Arc::new(Quiet), config.clone())
                .and_then(|l| l.with_tables(&t.procs, &t.units))
                .map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    for _ in 0..4 {
        for l in &leasers {
            l.heartbeat()?;
            l.tick()?;
        }
    }
    let ids: Vec<String> = leasers.iter().map(|l| l.process_id().to_owned()).collect();

    let lease = [("table", t.lease.as_str())];
    let leader = [("table", t.leader.as_str())];
    let tick = [("table", t.tick.as_str())];
    let fire = [("table", t.fire.as_str())];
    let both = [("units", t.units.as_str()), ("processes", t.procs.as_str())];
    let v = Arg::Var;
    let random = || vec!["\\set r random(1, 1000000000000)".to_owned()];
    let mut cases: Vec<Case> = Vec::new();

    let (tt, ft, lt, et) = (
        t.tick.clone(),
        t.fire.clone(),
        t.lease.clone(),
        t.leader.clone(),
    );
    // Tick claims.
    {
        let tt = tt.clone();
        let it = iso_taken.clone();
        cases.push(Case {
            name: "tick claim, refused",
            lib: Box::new(move |db, _, _| {
                let c = TickClaims::new(db).with_table(&tt).unwrap();
                Box::new(move |_| {
                    assert!(c
                        .claim("contended", taken, Duration::from_secs(60))
                        .unwrap()
                        .is_none())
                })
            }),
            script: Script::one(
                sql("tick_claims/claim.sql", &tick),
                vec![
                    v("job"),
                    v("tick"),
                    v("busy"),
                    v("owner"),
                    v("cid"),
                    Arg::True,
                    Arg::Lit("60000000"),
                ],
            ),
            vars: Box::new(move |_| {
                vars(&[
                    ("job", "contended".into()),
                    ("tick", it.clone()),
                    ("busy", "60000000".into()),
                    ("owner", "pgb".into()),
                    ("cid", "1".into()),
                ])
            }),
        });
    }
    {
        let tt = tt.clone();
        let it = iso_taken.clone();
        let mut script = Script::one(
            sql("tick_claims/claim.sql", &tick),
            vec![
                v("r"),
                v("tick"),
                v("busy"),
                v("owner"),
                v("r"),
                Arg::True,
                Arg::Lit("60000000"),
            ],
        );
        script.sets = random();
        cases.push(Case {
            name: "tick claim, won (new job)",
            lib: Box::new(move |db, n, run| {
                let c = TickClaims::new(db).with_table(&tt).unwrap();
                Box::new(move |i| {
                    assert!(c
                        .claim(&format!("lib-{run}-{n}-{i}"), taken, Duration::from_secs(1))
                        .unwrap()
                        .is_some())
                })
            }),
            script,
            vars: Box::new(move |_| {
                vars(&[
                    ("tick", it.clone()),
                    ("busy", "1000000".into()),
                    ("owner", "pgb".into()),
                ])
            }),
        });
    }
    // Fire claims.
    {
        let ft2 = ft.clone();
        cases.push(Case {
            name: "fire claim, refused",
            lib: Box::new(move |db, _, _| {
                let c = FireClaims::new(db).with_table(&ft2).unwrap();
                Box::new(move |_| assert!(!c.claim("hot@1").unwrap()))
            }),
            script: Script::one(
                sql("fire_claims/claim.sql", &fire),
                vec![v("key"), v("holder"), v("ttl"), v("cid")],
            ),
            vars: Box::new(|_| {
                vars(&[
                    ("key", "hot@1".into()),
                    ("holder", "pgb".into()),
                    ("ttl", "600000000".into()),
                    ("cid", "1".into()),
                ])
            }),
        });
        let ft2 = ft.clone();
        let mut script = Script::one(
            sql("fire_claims/claim.sql", &fire),
            vec![v("r"), v("holder"), v("ttl"), v("r")],
        );
        script.sets = random();
        cases.push(Case {
            name: "fire claim, won (new key)",
            lib: Box::new(move |db, n, run| {
                let c = FireClaims::new(db).with_table(&ft2).unwrap();
                Box::new(move |i| assert!(c.claim(&format!("lib-{run}-{n}@{i}")).unwrap()))
            }),
            script,
            vars: Box::new(|_| vars(&[("holder", "pgb".into()), ("ttl", "600000000".into())])),
        });
    }
    // Semaphores.
    {
        let st = t.sema.clone();
        cases.push(Case {
            name: "semaphore acquire, refused",
            lib: Box::new(move |db, _, _| {
                let s = Semaphore::new(db).with_table(&st).unwrap();
                Box::new(move |_| {
                    assert!(s
                        .acquire("full", 2, Duration::from_secs(30))
                        .unwrap()
                        .is_none())
                })
            }),
            script: Script::one(
                sql("semaphores/acquire.sql", &[("table", t.sema.as_str())]),
                vec![
                    v("key"),
                    v("owner"),
                    v("ttl"),
                    v("permits"),
                    Arg::True,
                    Arg::True,
                    TIMELINE,
                    Arg::Null,
                    Arg::Null,
                ],
            ),
            vars: Box::new(permit_vars),
        });
        // The ceiling of the row above: its statement sent by the driver alone, on a connection
        // of each client's own, prepared once, with pgbench's parameters.
        let text = sql("semaphores/acquire.sql", &[("table", t.sema.as_str())]);
        cases.push(Case {
            name: "semaphore acquire, refused, by the driver alone",
            lib: Box::new(move |_, n, _| {
                let url = super::common::url();
                let mut client = Client::connect(&url, NoTls).expect("a connection");
                let named = client
                    .prepare_typed(&text, &PERMIT_TYPES)
                    .expect("prepared");
                let owner = format!("driver-{n}");
                Box::new(move |_| {
                    let none: Option<SystemTime> = None;
                    let rows = client
                        .query(
                            &named,
                            &[
                                &"full",
                                &owner,
                                &30_000_000_i64,
                                &2_i32,
                                &true,
                                &true,
                                &1_i64,
                                &none,
                                &none,
                            ],
                        )
                        .expect("the acquire");
                    assert!(rows.is_empty(), "every permit is held");
                })
            }),
            script: cases
                .last()
                .map(|c: &Case| c.script.clone())
                .expect("the case above"),
            vars: Box::new(permit_vars),
        });
    }
    // Leases.
    {
        let lt2 = lt.clone();
        cases.push(Case {
            name: "lease acquire, refused",
            lib: Box::new(move |db, _, _| {
                let l = Leases::new(db).with_table(&lt2).unwrap();
                Box::new(move |_| {
                    assert!(l
                        .try_acquire("held", Duration::from_secs(30))
                        .unwrap()
                        .is_none())
                })
            }),
            script: Script::one(
                sql("leases/acquire.sql", &lease),
                vec![
                    v("key"),
                    v("owner"),
                    v("ttl"),
                    v("keep"),
                    Arg::True,
                    Arg::True,
                    TIMELINE,
                    Arg::Null,
                    Arg::Null,
                ],
            ),
            vars: Box::new(|n| {
                vars(&[
                    ("key", "held".into()),
                    ("owner", format!("pgb-{n}")),
                    ("ttl", "30000000".into()),
                    ("keep", "true".into()),
                ])
            }),
        });
        let lt2 = lt.clone();
        cases.push(Case {
            name: "lease acquire + release",
            lib: Box::new(move |db, n, run| {
                let l = Leases::new(db)
                    .with_table(&lt2)
                    .unwrap()
                    .with_owner(&format!("lib-{run}-{n}"))
                    .unwrap();
                let key = format!("lib-pair-{run}-{n}");
                Box::new(move |_| {
                    assert!(l
                        .try_acquire(&key, Duration::from_secs(30))
                        .unwrap()
                        .is_some());
                    assert!(l.release(&key).unwrap());
                })
            }),
            script: Script {
                sets: Vec::new(),
                steps: vec![
                    Step {
                        sql: sql("leases/acquire.sql", &lease),
                        args: vec![
                            v("key"),
                            v("owner"),
                            v("ttl"),
                            v("keep"),
                            Arg::True,
                            Arg::True,
                            TIMELINE,
                            Arg::Null,
                            Arg::Null,
                        ],
                        gset: false,
                    },
                    Step {
                        sql: sql("leases/release.sql", &lease),
                        // The token (none: by owner) and the notification channel (none: off,
                        // the default).
                        args: vec![v("key"), v("owner"), Arg::Null, Arg::Null],
                        gset: false,
                    },
                ],
            },
            vars: Box::new(|n| {
                vars(&[
                    ("key", format!("pgb-pair-{n}")),
                    ("owner", format!("pgb-{n}")),
                    ("ttl", "30000000".into()),
                    ("keep", "true".into()),
                ])
            }),
        });
        for (name, size) in [("lease renew, 1 key", 1), ("lease renew, 100 keys", 100)] {
            let lt2 = lt.clone();
            cases.push(Case {
                name,
                lib: Box::new(move |db, n, _| {
                    let n = n % 8;
                    let l = Leases::new(db)
                        .with_table(&lt2)
                        .unwrap()
                        .with_owner(&format!("lib-{n}"))
                        .unwrap();
                    let keys: Vec<String> = (0..size)
                        .map(|j| format!("lib-renew{size}-{n}-{j}"))
                        .collect();
                    Box::new(move |_| {
                        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                        let renewed = l.renew(&refs, Duration::from_secs(3600)).unwrap();
                        assert_eq!(renewed.held().count(), size);
                    })
                }),
                script: Script::one(
                    sql("leases/renew.sql", &lease),
                    vec![v("keys"), v("owner"), v("ttl")],
                ),
                vars: Box::new(move |n| {
                    let n = n % 8;
                    let keys: Vec<String> = (0..size)
                        .map(|j| format!("pgb-renew{size}-{n}-{j}"))
                        .collect();
                    vars(&[
                        ("keys", format!("{{{}}}", keys.join(","))),
                        ("owner", format!("pgb-{n}")),
                        ("ttl", "3600000000".into()),
                    ])
                }),
            });
        }
        let lt2 = lt.clone();
        cases.push(Case {
            name: "lease supersede",
            lib: Box::new(move |db, _, _| {
                let l = Leases::new(db).with_table(&lt2).unwrap();
                Box::new(move |_| assert!(l.supersede("held").unwrap()))
            }),
            script: Script::one(sql("leases/supersede.sql", &lease), vec![v("key")]),
            vars: Box::new(|_| vars(&[("key", "held".into())])),
        });
    }
    // Leader election.
    {
        let et2 = et.clone();
        cases.push(Case {
            name: "is_leader, follower",
            lib: Box::new(move |db, n, _| {
                let e = Elector::new(db)
                    .with_table(&et2)
                    .unwrap()
                    .with_name("followed")
                    .unwrap()
                    .with_holder(&format!("lib-{n}"))
                    .unwrap();
                Box::new(move |_| assert!(!e.is_leader().unwrap()))
            }),
            script: Script::one(
                sql("elector/is_leader.sql", &leader),
                vec![
                    v("name"),
                    v("holder"),
                    v("ttl"),
                    Arg::Null,
                    Arg::True,
                    Arg::True,
                    TIMELINE,
                    Arg::Null,
                    Arg::Null,
                    v("retry"),
                    Arg::Null,
                ],
            ),
            vars: Box::new(|n| {
                vars(&[
                    ("name", "followed".into()),
                    ("holder", format!("pgb-{n}")),
                    ("ttl", "30000000".into()),
                    ("retry", "10000000".into()),
                ])
            }),
        });
        let et2 = et.clone();
        let terms = leader_terms.clone();
        cases.push(Case {
            name: "is_leader, leader renewing",
            lib: Box::new(move |db, n, run| {
                let e = Elector::new(db)
                    .with_table(&et2)
                    .unwrap()
                    .with_name(&format!("lib-lead-{run}-{n}"))
                    .unwrap()
                    .with_ttl(Duration::from_secs(3600))
                    .unwrap();
                Box::new(move |_| assert!(e.is_leader().unwrap()))
            }),
            script: Script::one(
                sql("elector/is_leader.sql", &leader),
                vec![
                    v("name"),
                    v("holder"),
                    v("ttl"),
                    v("term"),
                    Arg::True,
                    Arg::True,
                    TIMELINE,
                    Arg::Null,
                    Arg::Null,
                    v("retry"),
                    v("term"),
                ],
            ),
            vars: Box::new(move |n| {
                vars(&[
                    ("name", format!("pgb-lead-{}", n % 8)),
                    ("holder", format!("pgb-{}", n % 8)),
                    ("ttl", "3600000000".into()),
                    ("retry", "1200000000".into()),
                    ("term", terms[n % 8].to_string()),
                ])
            }),
        });
        let et2 = et.clone();
        cases.push(Case {
            name: "leader",
            lib: Box::new(move |db, _, _| {
                let e = Elector::new(db)
                    .with_table(&et2)
                    .unwrap()
                    .with_name("followed")
                    .unwrap();
                Box::new(move |_| assert!(e.leader().unwrap().is_some()))
            }),
            script: Script::one(sql("elector/leader.sql", &leader), vec![v("name")]),
            vars: Box::new(|_| vars(&[("name", "followed".into())])),
        });
        let et2 = et.clone();
        cases.push(Case {
            name: "is_leader (elected) + resign",
            lib: Box::new(move |db, n, run| {
                let e = Elector::new(db)
                    .with_table(&et2)
                    .unwrap()
                    .with_name(&format!("lib-resign-{run}-{n}"))
                    .unwrap();
                Box::new(move |_| {
                    assert!(e.is_leader().unwrap());
                    e.resign().unwrap();
                })
            }),
            script: Script {
                sets: Vec::new(),
                steps: vec![
                    Step {
                        sql: sql("elector/is_leader.sql", &leader),
                        args: vec![
                            v("name"),
                            v("holder"),
                            v("ttl"),
                            Arg::Null,
                            Arg::True,
                            Arg::True,
                            TIMELINE,
                            Arg::Null,
                            Arg::Null,
                        ],
                        gset: true,
                    },
                    Step {
                        sql: sql("elector/resign.sql", &leader),
                        // The channel last: none (notifications off, the default).
                        args: vec![v("name"), v("holder"), v("term"), Arg::Null],
                        gset: false,
                    },
                ],
            },
            vars: Box::new(|n| {
                vars(&[
                    ("name", format!("pgb-resign-{n}")),
                    ("holder", format!("pgb-{n}")),
                    ("ttl", "30000000".into()),
                ])
            }),
        });
    }
    // Membership: eight live processes, 1,000 units.
    {
        let (l2, ids2) = (leasers.clone(), ids.clone());
        cases.push(Case {
            name: "membership heartbeat",
            lib: Box::new(move |_, n, _| {
                let l = l2[n % 8].clone();
                Box::new(move |_| l.heartbeat().unwrap())
            }),
            script: Script::one(
                sql("membership/heartbeat.sql", &both),
                vec![
                    v("id"),
                    v("ttl"),
                    v("units"),
                    v("weight"),
                    v("host"),
                    v("version"),
                    // Settled, its counts known, settling after 0 µs: a settled member's beat.
                    Arg::True,
                    Arg::True,
                    Arg::Lit("0"),
                ],
            ),
            vars: Box::new(move |n| {
                vars(&[
                    ("id", ids2[n % 8].clone()),
                    ("ttl", "600000000".into()),
                    ("units", "125".into()),
                    ("weight", "125".into()),
                    ("host", "pgbench".into()),
                    ("version", "0".into()),
                ])
            }),
        });
        let (l2, ids2) = (leasers.clone(), ids.clone());
        cases.push(Case {
            name: "membership tick, steady",
            lib: Box::new(move |_, n, _| {
                let l = l2[n % 8].clone();
                Box::new(move |_| assert_eq!(l.tick().unwrap().claimed, 0))
            }),
            script: Script::one(sql("membership/stats.sql", &both), vec![v("id")]),
            vars: Box::new(move |n| vars(&[("id", ids2[n % 8].clone())])),
        });
        let l2 = leasers.clone();
        cases.push(Case {
            name: "membership sweep",
            lib: Box::new(move |_, n, _| {
                let l = l2[n % 8].clone();
                Box::new(move |_| {
                    l.sweep().unwrap();
                })
            }),
            script: Script::one(sql("membership/sweep.sql", &both), vec![v("cutoff")]),
            vars: Box::new(|_| vars(&[("cutoff", "3600000000".into())])),
        });
    }
    Ok((cases, t, leasers))
}
