//! Part 4: leader election, as a campaign with events.

use std::time::{Duration, Instant};

use pgtenure::{
    elector::{Elector, LeaderEvent, Leadership},
    Db,
};

use crate::clock::round_ms;
use crate::INSTANCES;

/// Three members campaign; a follower asks the leader to step down; the new leader stops; each
/// hand-over is told as events.
pub fn election(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_secs(1);
    let retry = Duration::from_millis(100);
    println!("\n4. Leader election: three members campaign, polling every {retry:?}, TTL {ttl:?}");
    let fleet = format!("tour-{}", std::process::id());
    let mut members: Vec<Option<Leadership>> = INSTANCES
        .iter()
        .map(|name| {
            let elector = Elector::new(db)
                .with_name(&fleet)?
                .with_holder(name)?
                .with_ttl(ttl)?
                .with_retry_period(retry)?;
            elector.campaign().map(Some)
        })
        .collect::<Result<_, pgtenure::Error>>()?;
    let leader = |members: &[Option<Leadership>]| -> Option<usize> {
        members
            .iter()
            .position(|m| m.as_ref().is_some_and(Leadership::is_leading))
    };
    let wait_for_leader = |members: &[Option<Leadership>], not: Option<usize>| -> Option<usize> {
        let until = Instant::now() + ttl * 3;
        while Instant::now() < until {
            if let Some(i) = leader(members).filter(|i| Some(*i) != not) {
                return Some(i);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    };
    let first = wait_for_leader(&members, None).ok_or("nobody leads")?;
    show(&members, first);

    // A follower asks the leader to step down (a rolling deploy): it does at its next renewal.
    let follower = (first + 1) % members.len();
    let asked = Instant::now();
    members[follower]
        .as_ref()
        .ok_or("a follower")?
        .elector()
        .request_resign()?;
    let next = wait_for_leader(&members, Some(first)).ok_or("nobody took over")?;
    println!(
        "   {} asked {} to step down: {} leads {:?} later",
        INSTANCES[follower],
        INSTANCES[first],
        INSTANCES[next],
        round_ms(asked.elapsed())
    );
    show(&members, first);

    // The new leader stops (a graceful shutdown): it resigns, and the next poll elsewhere wins.
    let stopping = members[next].take().ok_or("the leader")?;
    let stopped = Instant::now();
    stopping.stop()?;
    let third = wait_for_leader(&members, None).ok_or("nobody took over")?;
    println!(
        "   {} stops: {} leads {:?} later",
        INSTANCES[next],
        INSTANCES[third],
        round_ms(stopped.elapsed())
    );
    for member in members.into_iter().flatten() {
        member.stop()?;
    }
    Ok(())
}

/// Prints what each member has been told so far, and who leads.
fn show(members: &[Option<Leadership>], leader: usize) {
    for (i, member) in members.iter().enumerate() {
        let Some(member) = member else { continue };
        let told: Vec<String> = member
            .events()
            .try_iter()
            .map(|event| match event {
                LeaderEvent::Elected { term } => format!("elected (term {term})"),
                LeaderEvent::Lost { term, reason } => format!("lost term {term}: {reason}"),
                LeaderEvent::Observed(Some(info)) => format!("{} leads", info.holder),
                LeaderEvent::Observed(None) => "nobody leads".to_owned(),
                other => format!("{other:?}"),
            })
            .collect();
        let mark = if i == leader { "*" } else { " " };
        println!("   {mark} {:<8} told: {}", INSTANCES[i], told.join(", "));
    }
}
