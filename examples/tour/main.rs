//! A tour of pgtenure: three instances of one application coordinate through PostgreSQL.
//!
//! Run it with `cargo run --example tour`. It uses `DATABASE_URL` when set (and creates pgtenure's
//! default tables there), else a throwaway server it starts and removes. Its five parts:
//!
//! 1. Tick claims: three instances ask for every tick of one job; each tick runs once, and a late
//!    instance's old tick and a fast clock's future tick are refused. Then the same kind of job
//!    with the scheduler (`schedule.rs`): ticks due by the database clock, so an instance whose
//!    clock runs 1.5 s fast neither runs early nor wins every tick.
//! 2. Fire claims: each fire, asked for by every instance, is won once; a live claim is refused to
//!    its own holder too; expired claims are purged.
//! 3. Keyed leases: one holder at a time, writes fenced by the tenure's token; a holder in another
//!    process is killed and its lease taken over after the TTL, and its late write refused.
//! 4. Leader election: three electors, terms that only grow, a resignation handed over at the next
//!    poll and a crashed leader replaced after its TTL.
//! 5. Membership: 48 units shared fairly by the live processes as one joins and another crashes.
//!
//! Each part is a file of its own here (`claims.rs`, `schedule.rs`, `leases.rs`, `election.rs`,
//! `membership.rs`),
//! with the schedule's clock helpers in `clock.rs`.

mod claims;
mod clock;
mod election;
mod leases;
mod membership;
mod schedule;

use pgtenure::Db;

/// The application's instances, by name.
const INSTANCES: [&str; 3] = ["instance-a", "instance-b", "instance-c"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Some(key) = std::env::var_os(leases::CHILD_ENV) {
        return leases::hold_until_killed(&key.to_string_lossy());
    }
    let from_env = std::env::var("DATABASE_URL").is_ok_and(|u| !u.trim().is_empty());
    let url = pgtenure::testing::database_url()?;
    let db = Db::connect(&url)?;
    pgtenure::migrate(&db)?;
    println!("pgtenure tour");
    println!(
        "database: {}\n",
        if from_env {
            "DATABASE_URL"
        } else {
            "a throwaway PostgreSQL server (set DATABASE_URL to use yours)"
        }
    );

    claims::tick_claims(&db)?;
    schedule::scheduler(&db)?;
    claims::fire_claims(&db)?;
    leases::leases(&db, &url)?;
    election::election(&db)?;
    membership::membership(&db)?;
    Ok(())
}
