//! Each operation side by side with `pgbench -M prepared` running the crate's own statement (the
//! limit), and with the crate sending it unprepared (an unnamed statement, planned at every call:
//! how pgtenure 0.1 sent everything), at each client count, in one run; the median of `runs` runs.
//! Then the same through PgBouncer in transaction mode.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use pgtenure::membership::{Config, Hooks, Leaser, Unit, Units};
use pgtenure::testing::render_sql;
use pgtenure::{Db, Elector, FireClaims, Leases, TickClaims};
use serde_json::{json, Value};

use super::pgbench::{self, Arg, Script, Step};
use super::{Error, Quiet};

/// Makes one client's operation: given the pool, the client's number and the measurement's number
/// (for keys of its own), returns what one iteration does.
type MakeOp = Box<dyn Fn(&Db, usize, u64) -> Box<dyn FnMut(u64) + Send> + Sync>;

/// One operation: how the library runs it, and the pgbench script running its statement.
struct Case {
    name: &'static str,
    lib: MakeOp,
    script: Script,
    /// The `-D` variables of pgbench client `n`.
    vars: Box<dyn Fn(usize) -> Vec<(String, String)>>,
}

/// The tables the comparison runs on, created by the library.
struct Tables {
    tick: String,
    fire: String,
    lease: String,
    leader: String,
    procs: String,
    units: String,
}

fn file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/sql/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("sql/{path}: {e}"))
}

fn sql(path: &str, tables: &[(&str, &str)]) -> String {
    render_sql(&file(path), tables).expect("valid table names")
}

fn vars(list: &[(&str, String)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Operations per second of `clients` threads each running its own op for `secs`.
fn measure(clients: usize, secs: u64, db: &Db, run: u64, make: &MakeOp) -> f64 {
    let barrier = Barrier::new(clients);
    let counts: Vec<(u64, f64)> = thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut op = make(db, t, run);
                    for i in 0..20 {
                        op(u64::MAX / 2 + i);
                    }
                    barrier.wait();
                    let start = Instant::now();
                    let until = start + Duration::from_secs(secs);
                    let mut i = 0;
                    while Instant::now() < until {
                        op(i);
                        i += 1;
                    }
                    (i, start.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    counts.iter().map(|(n, secs)| *n as f64 / secs).sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The tables, their fixtures (rows held by others, leaders, live processes) and the cases.
/// The cases, the tables they run on, and the live processes the membership cases use.
type Fixture = (Vec<Case>, Tables, Vec<Arc<Leaser>>);

fn cases(db: &Db, id: u32) -> Result<Fixture, Error> {
    let t = Tables {
        tick: format!("bench_tick_{id}"),
        fire: format!("bench_fire_{id}"),
        lease: format!("bench_lease_{id}"),
        leader: format!("bench_leader_{id}"),
        procs: format!("bench_procs_{id}"),
        units: format!("bench_units_{id}"),
    };
    TickClaims::new(db).with_table(&t.tick)?.create_table()?;
    FireClaims::new(db).with_table(&t.fire)?.create_table()?;
    Leases::new(db).with_table(&t.lease)?.create_table()?;
    Elector::new(db).with_table(&t.leader)?.create_table()?;
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
    let mut config = Config::default();
    config.ttl = Duration::from_secs(600);
    config.heartbeat_interval = Duration::from_secs(60);
    let leasers: Vec<Arc<Leaser>> = (0..8)
        .map(|_| {
            Leaser::new(db, Arc::new(Quiet), config.clone(), Hooks::default())
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
                vec![v("job"), v("tick"), v("busy"), v("owner"), v("cid")],
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
            vec![v("r"), v("tick"), v("busy"), v("owner"), v("r")],
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
                vec![v("key"), v("owner"), v("ttl"), v("keep")],
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
                        args: vec![v("key"), v("owner"), v("ttl"), v("keep")],
                        gset: false,
                    },
                    Step {
                        sql: sql("leases/release.sql", &lease),
                        args: vec![v("key"), v("owner"), Arg::Null],
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
                vec![v("name"), v("holder"), v("ttl"), Arg::Null],
            ),
            vars: Box::new(|n| {
                vars(&[
                    ("name", "followed".into()),
                    ("holder", format!("pgb-{n}")),
                    ("ttl", "30000000".into()),
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
                vec![v("name"), v("holder"), v("ttl"), v("term")],
            ),
            vars: Box::new(move |n| {
                vars(&[
                    ("name", format!("pgb-lead-{}", n % 8)),
                    ("holder", format!("pgb-{}", n % 8)),
                    ("ttl", "3600000000".into()),
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
                        args: vec![v("name"), v("holder"), v("ttl"), Arg::Null],
                        gset: true,
                    },
                    Step {
                        sql: sql("elector/resign.sql", &leader),
                        args: vec![v("name"), v("holder"), v("term")],
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

/// One cell of the table: medians over the runs.
struct Cell {
    name: &'static str,
    clients: usize,
    lib: Vec<f64>,
    unprepared: Vec<f64>,
    limit: Vec<f64>,
    bouncer: Vec<f64>,
    bouncer_unprepared: Vec<f64>,
}

/// Runs the comparison; returns its JSON.
pub fn run(
    url: &str,
    bouncer_url: Option<&str>,
    clients: &[usize],
    secs: u64,
    runs: usize,
) -> Result<Value, Error> {
    let pool = |url: &str, prepared: bool, cancel: bool| -> Result<Db, Error> {
        Ok(Db::builder(url)?
            .max_size(16)?
            .prepared_statements(prepared)
            .cancel_on_deadline(cancel)
            .build()?)
    };
    let db = pool(url, true, true)?;
    let unprepared = pool(url, false, true)?;
    let via = match bouncer_url {
        Some(b) => Some((pool(b, true, false)?, pool(b, false, false)?)),
        None => None,
    };
    let (mut cases, tables, leasers) = cases(&db, std::process::id())?;
    if let Ok(filter) = std::env::var("PGTENURE_BENCH_CASES") {
        cases.retain(|case| filter.split(',').any(|f| case.name.contains(f)));
    }
    let mut cells: Vec<Cell> = Vec::new();
    for case in &cases {
        for &c in clients {
            cells.push(Cell {
                name: case.name,
                clients: c,
                lib: Vec::new(),
                unprepared: Vec::new(),
                limit: Vec::new(),
                bouncer: Vec::new(),
                bouncer_unprepared: Vec::new(),
            });
        }
    }
    let mut measurement = 0_u64;
    for run in 0..runs {
        eprintln!("comparison run {} of {runs}", run + 1);
        let mut cell = cells.iter_mut();
        for case in &cases {
            for &c in clients {
                let cell = cell.next().unwrap();
                measurement += 1;
                cell.lib.push(measure(c, secs, &db, measurement, &case.lib));
                measurement += 1;
                cell.unprepared
                    .push(measure(c, secs, &unprepared, measurement, &case.lib));
                cell.limit
                    .push(pgbench::run(url, &case.script, c, secs, &*case.vars)?);
                if let Some((via, via_unprepared)) = &via {
                    measurement += 1;
                    cell.bouncer
                        .push(measure(c, secs, via, measurement, &case.lib));
                    measurement += 1;
                    cell.bouncer_unprepared.push(measure(
                        c,
                        secs,
                        via_unprepared,
                        measurement,
                        &case.lib,
                    ));
                }
                eprintln!(
                    "  {:<30} {c}: {:.0} / pgbench {:.0} / unprepared {:.0}",
                    case.name,
                    cell.lib.last().unwrap(),
                    cell.limit.last().unwrap(),
                    cell.unprepared.last().unwrap()
                );
            }
        }
    }
    println!(
        "\nmedian of {runs} runs, {secs} s each; limit: pgbench -M prepared running the crate's statement"
    );
    println!(
        "| operation | clients | pgtenure/s | pgbench prepared/s | ratio | unprepared/s | speedup |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut out = Vec::new();
    for cell in &cells {
        let (lib, limit, unprep) = (
            median(cell.lib.clone()),
            median(cell.limit.clone()),
            median(cell.unprepared.clone()),
        );
        println!(
            "| {} | {} | {lib:.0} | {limit:.0} | {:.2} | {unprep:.0} | {:.1}x |",
            cell.name,
            cell.clients,
            lib / limit,
            lib / unprep
        );
        let mut row = json!({
            "operation": cell.name, "clients": cell.clients,
            "pgtenure": lib, "pgbench_prepared": limit, "ratio": lib / limit,
            "unprepared": unprep, "speedup": lib / unprep,
            "runs": { "pgtenure": cell.lib, "pgbench_prepared": cell.limit, "unprepared": cell.unprepared },
        });
        if via.is_some() {
            row["through_pgbouncer"] = json!({
                "pgtenure": median(cell.bouncer.clone()),
                "unprepared": median(cell.bouncer_unprepared.clone()),
            });
        }
        out.push(row);
    }
    if via.is_some() {
        println!(
            "\nthrough PgBouncer (transaction mode, default configuration), median of {runs} runs"
        );
        println!(
            "| operation | clients | pgtenure/s | unprepared/s | speedup | direct pgtenure/s | pooler's cost |"
        );
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for cell in &cells {
            let (b, bu, lib) = (
                median(cell.bouncer.clone()),
                median(cell.bouncer_unprepared.clone()),
                median(cell.lib.clone()),
            );
            println!(
                "| {} | {} | {b:.0} | {bu:.0} | {:.1}x | {lib:.0} | {:.2} |",
                cell.name,
                cell.clients,
                b / bu,
                b / lib
            );
        }
    }
    let limits = driver_limits(url, &tables.tick, clients, secs, runs)?;
    drop(leasers);
    let mut admin = pgtenure::postgres::Client::connect(url, pgtenure::postgres::NoTls)?;
    for table in [
        &tables.tick,
        &tables.fire,
        &tables.lease,
        &tables.leader,
        &tables.units,
        &tables.procs,
    ] {
        admin.batch_execute(&format!("DROP TABLE IF EXISTS \"{table}\""))?;
    }
    admin.batch_execute(&format!(
        "DROP SEQUENCE IF EXISTS \"{}_token_seq\", \"{}_term_seq\"",
        tables.lease, tables.leader
    ))?;
    Ok(json!({ "operations": out, "driver": limits }))
}

/// Where the gap to pgbench comes from: the refused tick claim sent by the driver alone (no pool,
/// no pgtenure), as a protocol-level prepared statement (not pooler-safe: the driver names them
/// `s0, s1, ...` in every process) and as SQL-level `EXECUTE` (what pgtenure sends).
fn driver_limits(
    url: &str,
    tick_t: &str,
    clients: &[usize],
    secs: u64,
    runs: usize,
) -> Result<Value, Error> {
    use pgtenure::postgres::types::Type;
    use pgtenure::postgres::{Client, NoTls};
    let text = sql("tick_claims/claim.sql", &[("table", tick_t)]);
    let types = [
        Type::TEXT,
        Type::TIMESTAMPTZ,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
    ];
    let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(1_750_000_000);
    let run = |clients: usize, protocol: bool| -> f64 {
        let barrier = Barrier::new(clients);
        let counts: Vec<f64> = thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    let (barrier, text, types) = (&barrier, &text, &types);
                    s.spawn(move || {
                        let mut c = Client::connect(url, NoTls).unwrap();
                        let named = c.prepare_typed(text, types).unwrap();
                        c.batch_execute(&format!(
                            "PREPARE limit_claim (text, timestamptz, int8, text, int8) AS {text}"
                        ))
                        .unwrap();
                        let execute = "EXECUTE limit_claim('contended', \
                                       '2025-06-15 15:06:40+00', '60000000', 'x', '1')";
                        let once = |c: &mut Client| {
                            let rows = if protocol {
                                c.query(
                                    &named,
                                    &[&"contended", &taken, &60_000_000_i64, &"x", &1_i64],
                                )
                            } else {
                                c.query_typed(execute, &[])
                            };
                            assert!(rows.unwrap()[0].get::<_, Option<i64>>("token").is_none());
                        };
                        for _ in 0..20 {
                            once(&mut c);
                        }
                        barrier.wait();
                        let start = Instant::now();
                        let mut n = 0_u64;
                        while start.elapsed() < Duration::from_secs(secs) {
                            once(&mut c);
                            n += 1;
                        }
                        n as f64 / start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        counts.iter().sum()
    };
    // What taking each statement's connection from an r2d2 pool costs, on `SELECT 1`.
    let pool = r2d2::Pool::builder()
        .max_size(16)
        .test_on_check_out(false)
        .build(r2d2_postgres::PostgresConnectionManager::new(
            url.parse()?,
            NoTls,
        ))?;
    let select = |clients: usize, pooled: bool| -> f64 {
        let counts: Vec<f64> = thread::scope(|s| {
            let handles: Vec<_> = (0..clients)
                .map(|_| {
                    let pool = &pool;
                    s.spawn(move || {
                        let mut own = Client::connect(url, NoTls).unwrap();
                        let start = Instant::now();
                        let mut n = 0_u64;
                        while start.elapsed() < Duration::from_secs(secs) {
                            if pooled {
                                pool.get().unwrap().query_typed("SELECT 1", &[]).unwrap();
                            } else {
                                own.query_typed("SELECT 1", &[]).unwrap();
                            }
                            n += 1;
                        }
                        n as f64 / start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        counts.iter().sum()
    };
    let mut out = Vec::new();
    println!(
        "\nthe driver alone, one connection per client, median of {runs} runs: the refused tick \
         claim, and SELECT 1 on a connection of its own or from an r2d2 pool"
    );
    println!(
        "| clients | claim, protocol-level prepared/s (not pooler-safe) | claim, SQL-level \
         EXECUTE/s | SELECT 1, own connection/s | SELECT 1, from an r2d2 pool/s |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for &c in clients {
        let protocol = median((0..runs).map(|_| run(c, true)).collect());
        let execute = median((0..runs).map(|_| run(c, false)).collect());
        let own = median((0..runs).map(|_| select(c, false)).collect());
        let pooled = median((0..runs).map(|_| select(c, true)).collect());
        println!("| {c} | {protocol:.0} | {execute:.0} | {own:.0} | {pooled:.0} |");
        out.push(json!({
            "clients": c, "protocol_prepared": protocol, "sql_execute": execute,
            "select_1_own_connection": own, "select_1_pooled": pooled,
        }));
    }
    Ok(Value::Array(out))
}
