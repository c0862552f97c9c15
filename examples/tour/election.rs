//! Part 4: leader election.

use std::thread;
use std::time::{Duration, Instant};

use pgtenure::{Db, Elector};

use crate::clock::round_ms;
use crate::INSTANCES;

/// Three electors poll; the leader resigns and the hand-over is immediate; then it crashes.
pub fn election(db: &Db) -> Result<(), Box<dyn std::error::Error>> {
    let ttl = Duration::from_secs(1);
    println!("\n4. Leader election: three electors poll every 100 ms, TTL {ttl:?}");
    let fleet = format!("tour-{}", std::process::id());
    let electors: Vec<Elector> = INSTANCES
        .iter()
        .map(|name| {
            Elector::new(db)
                .with_name(&fleet)?
                .with_holder(name)?
                .with_ttl(ttl)
        })
        .collect::<Result<_, _>>()?;
    let poll = |skip: Option<usize>| -> Result<Option<usize>, pgtenure::Error> {
        let mut leader = None;
        for (i, e) in electors.iter().enumerate() {
            if Some(i) != skip && e.is_leader()? {
                leader = Some(i);
            }
        }
        Ok(leader)
    };
    let first = poll(None)?.ok_or("nobody leads")?;
    let info = electors[0].leader()?.ok_or("nobody leads")?;
    println!("   {} leads with term {}", info.holder, info.term);
    for _ in 0..3 {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            poll(None)?,
            Some(first),
            "leadership is stable while polled"
        );
    }
    println!(
        "   three more polls: still {} (term {})",
        INSTANCES[first],
        term(&electors[first])
    );

    electors[first].resign()?;
    let resigned = Instant::now();
    let next = poll(Some(first))?.ok_or("nobody took over")?;
    println!(
        "   {} resigns; on the next poll {} leads with term {}, {:.1?} later",
        INSTANCES[first],
        INSTANCES[next],
        term(&electors[next]),
        resigned.elapsed()
    );

    // The new leader stops polling, as a crashed process would: the others wait out its TTL.
    let crashed = Instant::now();
    let third = loop {
        thread::sleep(Duration::from_millis(100));
        if let Some(i) = poll(Some(next))? {
            break i;
        }
    };
    println!(
        "   {} stops polling (crash); {} leads with term {} after {:?} (TTL {ttl:?})",
        INSTANCES[next],
        INSTANCES[third],
        term(&electors[third]),
        round_ms(crashed.elapsed())
    );
    electors[third].resign()?;
    Ok(())
}

fn term(elector: &Elector) -> String {
    elector
        .term()
        .map_or_else(|| "none".to_owned(), |t| t.to_string())
}
