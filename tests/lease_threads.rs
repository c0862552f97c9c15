//! Thread ownership of managed leases, in a binary of its own: it counts this process's threads by
//! name, so no other test may run beside it.

mod common;

use std::time::Duration;

use common::{client, db, wait_for, Tables};
use pgtenure::leases::Leases;

/// How many threads of this process carry `name` (Linux: /proc/self/task/*/comm).
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .count()
}

/// Waits (up to 500 ms) until `threads_named(name)` is `n`, and returns the count then. A joined
/// thread has ended, but the kernel may list its task in /proc for a moment after `join` returns
/// (it wakes the joiner before it removes the task).
fn settles_to(name: &str, n: usize) -> usize {
    let until = std::time::Instant::now() + Duration::from_millis(500);
    loop {
        let count = threads_named(name);
        if count == n || std::time::Instant::now() > until {
            return count;
        }
        // The poll interval of this bounded wait.
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn live(table: &str, key: &str) -> bool {
    client()
        .query_one(
            &format!("SELECT held_until > now() FROM {table} WHERE key = $1"),
            &[&key],
        )
        .unwrap()
        .get(0)
}

#[test]
fn dropping_leases_joins_their_threads_and_releases_their_rows() {
    let mut tables = Tables::new();
    let table = tables.name("lease");
    let leases = Leases::new(&db()).with_table(&table).unwrap();
    leases.create_table().unwrap();
    assert_eq!(threads_named("pgtenure-renew"), 0);
    assert_eq!(threads_named("pgtenure-watch"), 0);

    // Long enough that no lease lapses under load before it is released: a lost lease's release
    // does not wait for a renewal thread that may be stuck, and the counts below would be off.
    let ttl = Duration::from_secs(2);
    let held: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| leases.acquire(k, ttl).unwrap().unwrap())
        .collect();
    // A thread names itself once it runs, so wait for the names to appear.
    wait_for(
        "three named renewal threads",
        Duration::from_secs(5),
        || (threads_named("pgtenure-renew") == 3).then_some(()),
    );
    assert_eq!(
        threads_named("pgtenure-renew"),
        3,
        "one renewal thread per lease"
    );
    wait_for("the named watcher", Duration::from_secs(5), || {
        (threads_named("pgtenure-watch") == 1).then_some(())
    });
    assert!(["a", "b", "c"].iter().all(|k| live(&table, k)));

    let mut held = held.into_iter();
    held.next().unwrap().release().unwrap();
    assert_eq!(
        settles_to("pgtenure-renew", 2),
        2,
        "release joined its thread"
    );
    drop(held);
    assert_eq!(
        settles_to("pgtenure-renew", 0),
        0,
        "drop joined the threads"
    );
    assert!(
        ["a", "b", "c"].iter().all(|k| !live(&table, k)),
        "drop released the rows"
    );

    assert_eq!(
        threads_named("pgtenure-watch"),
        1,
        "the family is still alive"
    );
    drop(leases);
    assert_eq!(
        settles_to("pgtenure-watch", 0),
        0,
        "the last handle joined the watcher"
    );
}
