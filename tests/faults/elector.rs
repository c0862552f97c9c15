//! A campaigning leader whose process dies: the others take over within a TTL and a retry period.

use std::time::{Duration, Instant};

use crate::common::{db, wait_for, Tables};
use pgtenure::elector::{Elector, LeaderEvent};

use super::child::Child;
use super::CHILD_ENV;

const TTL: Duration = Duration::from_millis(900);
const RETRY: Duration = Duration::from_millis(150);

fn elector(table: &str, holder: &str) -> Elector {
    Elector::new(&db())
        .with_table(table)
        .unwrap()
        .with_holder(holder)
        .unwrap()
        .with_ttl(TTL)
        .unwrap()
        .with_retry_period(RETRY)
        .unwrap()
}

/// The child side: campaign, report the term once leading, then wait to be killed.
fn leader_child(table: &str) {
    let campaign = elector(table, "child").campaign().unwrap();
    let term = wait_for("the child to lead", Duration::from_secs(10), || {
        campaign.term()
    });
    println!("TOKEN {term}");
    // Real time is the subject: the child leads until the parent kills it (60 s at most).
    std::thread::sleep(Duration::from_secs(60));
    println!("DONE");
}

#[test]
fn a_killed_leader_process_is_replaced_within_a_ttl_and_a_retry_period() {
    if std::env::var(CHILD_ENV).is_ok_and(|m| m == "campaign-leader") {
        return leader_child(&std::env::var("PGTENURE_CHILD_TABLE").unwrap());
    }
    let mut tables = Tables::new();
    let table = crate::common::leader_table(&mut tables);
    let child = Child::spawn(
        "elector::a_killed_leader_process_is_replaced_within_a_ttl_and_a_retry_period",
        "campaign-leader",
        &[("PGTENURE_CHILD_TABLE", &table)],
    );
    let term = child.token();
    let follower = elector(&table, "follower").campaign().unwrap();
    assert!(!follower.is_leading());
    child.signal("-KILL");
    let killed = Instant::now();
    let new_term = wait_for("the follower to take over", TTL * 4, || follower.term());
    let took = killed.elapsed();
    println!("hand-over after a crash: {took:?}");
    assert!(new_term > term);
    assert!(took <= TTL + RETRY + Duration::from_secs(1), "{took:?}");
    assert!(
        follower
            .events()
            .try_iter()
            .any(|e| e == LeaderEvent::Elected { term: new_term }),
        "told"
    );
    follower.stop().unwrap();
    child.reap();
}
