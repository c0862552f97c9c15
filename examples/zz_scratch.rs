use postgres::{types::Type, Client, NoTls};
use std::time::{Duration, Instant, SystemTime};
fn rate(secs: f64, mut f: impl FnMut()) -> f64 {
    for _ in 0..200 {
        f();
    }
    let s = Instant::now();
    let mut n = 0u64;
    while s.elapsed() < Duration::from_secs_f64(secs) {
        f();
        n += 1;
    }
    n as f64 / s.elapsed().as_secs_f64()
}
fn main() {
    let url = "postgres://postgres@127.0.0.1:5432/test";
    let mut c = Client::connect(url, NoTls).unwrap();
    let sql = include_str!("../sql/tick_claims/claim.sql").replace("{table}", "\"zz_tick\"");
    c.batch_execute("DROP TABLE IF EXISTS zz_tick; CREATE TABLE zz_tick (job_id text PRIMARY KEY, tick timestamptz NOT NULL, busy_until timestamptz, owner text NOT NULL, token bigint NOT NULL, claim_id bigint); INSERT INTO zz_tick VALUES ('job', '9000-01-01', NULL, 'x', 1, 1)").unwrap();
    std::fs::write(
        "/tmp/scratch/claim.sql",
        sql.replace("$1", ":job")
            .replace("$2", ":tick")
            .replace("$3", ":busy")
            .replace("$4", ":owner")
            .replace("$5", ":cid"),
    )
    .unwrap();
    let tick = SystemTime::now();
    let (job, busy, owner, cid) = ("job", 1_000_000i64, "me", 7i64);
    let secs = 4.0;
    let p = c
        .prepare_typed(
            &sql,
            &[
                Type::TEXT,
                Type::TIMESTAMPTZ,
                Type::INT8,
                Type::TEXT,
                Type::INT8,
            ],
        )
        .unwrap();
    c.batch_execute(&format!(
        "PREPARE pgt_t(text, timestamptz, int8, text, int8) AS {sql}"
    ))
    .unwrap();
    let lit = "EXECUTE pgt_t('job', '2026-12-01T11:00:00.123456Z', 1000000, 'me', 7)";
    for round in 0..2 {
        let a = rate(secs, || {
            c.query(&p, &[&job, &tick, &busy, &owner, &cid]).unwrap();
        });
        let b = rate(secs, || {
            c.query_typed(lit, &[]).unwrap();
        });
        let cc = rate(secs, || {
            c.simple_query(lit).unwrap();
        });
        let d = rate(secs, || {
            c.query_typed(
                &sql,
                &[
                    (&job, Type::TEXT),
                    (&tick, Type::TIMESTAMPTZ),
                    (&busy, Type::INT8),
                    (&owner, Type::TEXT),
                    (&cid, Type::INT8),
                ],
            )
            .unwrap();
        });
        let e = rate(secs, || {
            c.query_typed("SELECT 1", &[]).unwrap();
        });
        println!("round {round}: protocol-prepared {a:.0}  execute-unnamed {b:.0}  execute-simple {cc:.0}  unnamed-raw {d:.0}  select1 {e:.0}");
    }
}
