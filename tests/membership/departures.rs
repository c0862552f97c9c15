//! Processes that leave: gracefully, by crashing, by lapsing past their TTL or their local
//! deadline, or with their row deleted; and the sweep of what they leave behind.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{client, wait_for};
use pgtenure::membership::{Leaser, Unit, UnitLoss};

use super::{assert_disjoint, config, returns_within, round, Fleet, Recorder};

#[test]
fn a_crashed_leasers_units_are_claimed_after_its_ttl_and_its_stale_tick_does_nothing() {
    let fleet = Fleet::new(100);
    // A survivor's rounds (a heartbeat and a tick each) must keep it live while the others take
    // their turns: a TTL of 2 s leaves 1.6 s between two of its heartbeats, not the 480 ms of a
    // 600 ms TTL that a loaded machine can overrun.
    let ttl = Duration::from_secs(2);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4).map(|_| fleet.leaser(config(ttl))).collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    round(&all);
    let crashed = all[3];
    let crashed_units: BTreeSet<Unit> = crashed.owned().into_iter().collect();
    let expires_at: std::time::SystemTime = client()
        .query_one(
            &format!(
                "SELECT expires_at FROM {} WHERE process_id = $1::text::uuid",
                fleet.processes
            ),
            &[&crashed.process_id()],
        )
        .unwrap()
        .get(0);
    let survivors = &all[..3];
    let counts = wait_for(
        "the survivors to take the crashed units",
        Duration::from_secs(10),
        || {
            let counts = round(survivors);
            (counts.iter().sum::<usize>() == 100).then_some(counts)
        },
    );
    println!("survivors own {counts:?}");
    assert!(
        counts.iter().all(|n| (32..=34).contains(n)),
        "fair share 34: {counts:?}"
    );
    let taken_at: std::time::SystemTime = client()
        .query_one(
            &format!(
                "SELECT min(claimed_at) FROM {} WHERE (tenant, shard) IN (SELECT * FROM unnest($1::text[], $2::int[]))",
                fleet.units_table
            ),
            &[
                &crashed_units.iter().map(|u| u.tenant.clone()).collect::<Vec<_>>(),
                &crashed_units.iter().map(|u| u.shard).collect::<Vec<_>>(),
            ],
        )
        .unwrap()
        .get(0);
    assert!(
        taken_at >= expires_at,
        "claimed at {taken_at:?} before the TTL ended at {expires_at:?}"
    );
    assert_disjoint(&fleet, survivors);

    // The crashed process wakes up and ticks without a heartbeat: it learns its losses, and claims
    // and sheds nothing, even with unowned units about.
    fleet
        .units
        .add(&[Unit::new("late", 1).unwrap(), Unit::new("late", 2).unwrap()])
        .unwrap();
    let stale = crashed.tick().unwrap();
    assert!(!stale.live);
    assert_eq!((stale.claimed, stale.shed, stale.owned), (0, 0, 0));
    assert_eq!(
        stale.lost.into_iter().collect::<BTreeSet<_>>(),
        crashed_units
    );
    assert!(fleet.ownership()[&None].contains(&Unit::new("late", 1).unwrap()));
}

#[test]
fn a_graceful_leave_hands_units_over_at_the_next_round_without_waiting_for_a_ttl() {
    let fleet = Fleet::new(100);
    let made: Vec<(Leaser, Arc<Recorder>)> = (0..4)
        .map(|_| fleet.leaser(config(Duration::from_secs(60))))
        .collect();
    let all: Vec<&Leaser> = made.iter().map(|(l, _)| l).collect();
    for leaser in &all {
        leaser.heartbeat().unwrap();
    }
    round(&all);
    let leaving = all[3];
    let held: BTreeSet<Unit> = leaving.owned().into_iter().collect();
    let released = leaving.release().unwrap();
    assert_eq!(released.len(), 25);
    assert!(leaving.owned().is_empty());
    // Its work was stopped before the units were given back.
    let told = made[3].1.events.lock().clone();
    assert_eq!(
        told.last()
            .map(|(kind, units)| (*kind, units.iter().cloned().collect())),
        Some(("lost", held.clone())),
        "release tells the reconciler first"
    );
    assert_eq!(released.into_iter().collect::<BTreeSet<_>>(), held);
    leaving.delete_process().unwrap();
    let started = Instant::now();
    let counts = round(&all[..3]);
    assert_eq!(counts.iter().sum::<usize>(), 100, "{counts:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(
        counts.iter().all(|n| (32..=34).contains(n)),
        "fair share 34: {counts:?}"
    );
    let rows: i64 = crate::common::count(&mut client(), &fleet.processes);
    assert_eq!(rows, 3, "the process row is gone");
}

#[test]
fn sweep_deletes_long_dead_processes_and_frees_their_units() {
    let fleet = Fleet::new(40);
    let ttl = Duration::from_millis(300);
    let (dead, _) = fleet.leaser(config(ttl));
    let (alive, _) = fleet.leaser(config(ttl));
    dead.heartbeat().unwrap();
    dead.tick().unwrap();
    assert_eq!(dead.owned().len(), 40, "alone, it owns everything");
    let swept = wait_for(
        "the dead row to pass the sweep cutoff",
        Duration::from_secs(10),
        || {
            alive.heartbeat().unwrap();
            let sweep = alive.sweep().unwrap();
            (sweep.processes > 0).then_some(sweep)
        },
    );
    assert_eq!((swept.processes, swept.units), (1, 40));
    let truth = fleet.ownership();
    assert_eq!(truth[&None].len(), 40, "freed");
    assert!(!truth.contains_key(&Some(dead.process_id().to_owned())));
    assert_eq!(
        alive.sweep().unwrap().processes,
        0,
        "the live process is never swept"
    );
}

#[test]
fn past_its_local_deadline_a_leaser_owns_nothing_and_a_late_heartbeat_reports_the_loss() {
    let fleet = Fleet::new(10);
    // The heartbeat and the first tick (three statements, prepared on first use) must end before
    // the local deadline, four fifths of the TTL later: 1.6 s, not the 320 ms of a 400 ms TTL that
    // a loaded machine can overrun.
    let ttl = Duration::from_secs(2);
    let (leaser, recorder) = fleet.leaser(config(ttl));
    assert_eq!(leaser.live_until(), None);
    leaser.heartbeat().unwrap();
    let until = leaser.live_until().expect("live after a heartbeat");
    assert_eq!(leaser.tick().unwrap().owned, 10);
    assert_eq!(leaser.owned().len(), 10);
    wait_for("the local deadline to pass", Duration::from_secs(5), || {
        (Instant::now() >= until).then_some(())
    });
    assert!(
        leaser.owned().is_empty(),
        "past its deadline another process may own them"
    );
    // The database also let the row expire: the late heartbeat says so, and the units are lost.
    fleet.wait_until_expired(&leaser);
    leaser.heartbeat().unwrap();
    let lost = recorder.lost();
    assert_eq!(lost, 10, "the late heartbeat reported every unit lost");
    assert_eq!(recorder.lost_for(UnitLoss::Expired), 10, "as expired");
    assert!(leaser.owned().is_empty());
    // Nobody took them meanwhile, so the next tick finds them still this process's.
    let report = leaser.tick().unwrap();
    assert_eq!((report.gained.len(), report.claimed), (10, 0));
    assert_eq!(leaser.owned().len(), 10);
}

/// A claim of an expired process's units must not land once that process is live again, even when
/// the claim's snapshot predates the heartbeat: two processes would own a unit at once. Here a slow
/// claim (it walks a long-dead process's many disabled units first) starts while process A is
/// expired; A heartbeats and re-reads its unit before the claim reaches it.
#[test]
fn a_claim_that_began_while_a_process_was_expired_does_not_take_its_units_once_it_is_back() {
    let fleet = Fleet::new(0);
    let mut c = client();
    // A long-dead process with many disabled units, inserted first so a claim meets it first.
    let dead = "00000000-0000-4000-8000-000000000001";
    c.batch_execute(&format!(
        "INSERT INTO {procs} (process_id, expires_at, hostname, version, started_at)
             VALUES ('{dead}', now() - interval '1 hour', 'gone', '0', now() - interval '2 hours');
         INSERT INTO {units} (tenant, shard, process_id, weight, slot)
             SELECT 'disabled', g, '{dead}', 0, g FROM generate_series(1, 400000) g;
         INSERT INTO {units} (tenant, shard, weight, slot) VALUES ('t', 1, 1, 5);
         ANALYZE {units};",
        procs = fleet.processes,
        units = fleet.units_table,
    ))
    .unwrap();
    let unit = Unit::new("t", 1).unwrap();
    // A's first tick walks the dead process's units too (0.8 s here, alone): its TTL leaves room
    // for that on a loaded machine, or A is past its local deadline when the tick returns and
    // owns nothing (seen once with 5 s, while other builds ran).
    let (a, _) = fleet.leaser(config(Duration::from_secs(10)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    assert_eq!(a.owned(), vec![unit.clone()]);
    // B on its own connection, so its statement can be told apart from everyone else's.
    let app = format!("claimer_{}", std::process::id());
    let (b, _) = fleet.leaser_named(&app, config(Duration::from_secs(30)));
    let b = Arc::new(b);
    b.heartbeat().unwrap();
    fleet.wait_until_expired(&a);
    let ticking = {
        let b = b.clone();
        thread::spawn(move || b.tick())
    };
    // B's claim has taken its snapshot and is walking the dead process's units.
    wait_for("B's claim to be under way", Duration::from_secs(10), || {
        let slow: bool = c
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                                 WHERE application_name = $1 AND state = 'active'
                                   AND clock_timestamp() - query_start > interval '20 ms')",
                &[&app],
            )
            .unwrap()
            .get(0);
        slow.then_some(())
    });
    a.heartbeat().unwrap();
    let a_tick = a.tick().unwrap();
    let b_tick = ticking.join().unwrap().unwrap();
    let a_owns = a.owned().contains(&unit);
    let b_owns = b.owned().contains(&unit);
    assert!(
        !(a_owns && b_owns),
        "both own {unit}: A's tick {a_tick:?}, B's tick {b_tick:?}"
    );
    assert!(
        a_owns || b_owns,
        "nobody owns {unit}: A's tick {a_tick:?}, B's tick {b_tick:?}"
    );
    // Whoever owns it, the database agrees with its view.
    let owner = if a_owns {
        a.process_id()
    } else {
        b.process_id()
    };
    assert_eq!(
        fleet.ownership()[&Some(owner.to_owned())],
        BTreeSet::from([unit])
    );
}

/// A heartbeat whose statement began before the row expired but reached the row only after another
/// process took the units (it waited for the taker's lock) is judged on its own snapshot: the row
/// was live then, so the statement says it did not lapse. Its answer comes after the previous beat's
/// local deadline, though, and that alone must make the process forget its units.
#[test]
fn a_heartbeat_held_up_by_a_takeover_forgets_the_units_taken() {
    let fleet = Fleet::new(3);
    let app = format!("held_up_{}", std::process::id());
    // Every margin below is a share of the TTL, not an assumption about a quiet machine: the
    // heartbeat starts a tenth of the TTL before A's local deadline (three tenths before its row
    // expires), and it sets a deadline 0.7 TTL after that one, which leaves 0.5 TTL after the
    // row's expiry for the takeover to commit and the heartbeat to return (1.5 s under load).
    let ttl = Duration::from_secs(3);
    let (a, recorder) = fleet.leaser_named(&app, config(ttl));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 3);
    b.heartbeat().unwrap();
    let mut taker = client();
    let mut tx = taker.transaction().unwrap();
    let procs = &fleet.processes;
    tx.execute(
        &format!("SELECT 1 FROM {procs} WHERE process_id = $1::text::uuid FOR UPDATE"),
        &[&a.process_id()],
    )
    .unwrap();
    // The heartbeat goes late in A's term, so the deadline it sets is still ahead when it returns
    // (real time is the subject: the wait runs to a tenth of the TTL before A's local deadline).
    let deadline = a.live_until().unwrap();
    thread::sleep(deadline.saturating_duration_since(Instant::now() + ttl / 10));
    thread::scope(|scope| {
        let beat = scope.spawn(|| a.heartbeat());
        // The heartbeat has started and waits for the row; then the row expires, and the taker
        // takes the units as a claim does.
        wait_for(
            "the heartbeat to wait for the row",
            Duration::from_secs(5),
            || Fleet::waits_for_a_lock(&app).then_some(()),
        );
        fleet.wait_until_expired(&a);
        tx.batch_execute(&format!(
            "UPDATE {units} SET process_id = '{b}' WHERE process_id = '{a}';
             UPDATE {procs} SET changes = changes + 1 WHERE process_id = '{a}'",
            units = fleet.units_table,
            a = a.process_id(),
            b = b.process_id(),
        ))
        .unwrap();
        tx.commit().unwrap();
        beat.join().unwrap().unwrap();
    });
    let now = Instant::now();
    assert!(
        a.live_until().unwrap() > now,
        "A is live again ({:?} past its new deadline)",
        now.saturating_duration_since(a.live_until().unwrap())
    );
    assert!(
        a.owned().is_empty(),
        "A still believes it owns {:?}, which B owns",
        a.owned()
    );
    let lost = recorder.lost();
    assert_eq!(lost, 3, "A's reconciler was told");
}

/// Units left pointing at a process row that no longer exists (a claim still running when its
/// process deleted its row) are freed by the sweep once claimed before the cutoff; a unit that a
/// process newer than the sweep claimed recently is left alone.
#[test]
fn the_sweep_frees_units_whose_process_row_is_gone() {
    let fleet = Fleet::new(0);
    let (alive, _) = fleet.leaser(config(Duration::from_secs(30)));
    alive.heartbeat().unwrap();
    client()
        .batch_execute(&format!(
            "INSERT INTO {units} (tenant, shard, process_id, claimed_at)
                 VALUES ('stray', 1, '00000000-0000-4000-8000-00000000dead', now() - interval '2 hours'),
                        ('fresh', 1, '00000000-0000-4000-8000-00000000beef', now());
             INSERT INTO {units} (tenant, shard, process_id, claimed_at, weight, removed)
                 VALUES ('stray', 2, '00000000-0000-4000-8000-00000000dead', now() - interval '2 hours', 0, true)",
            units = fleet.units_table
        ))
        .unwrap();
    let sweep = alive.sweep().unwrap();
    assert_eq!((sweep.processes, sweep.units), (0, 2));
    let owners = fleet.ownership();
    assert_eq!(
        owners.get(&None),
        Some(&BTreeSet::from([Unit::new("stray", 1).unwrap()])),
        "freed; the removed one deleted: {owners:?}"
    );
    assert!(
        owners.contains_key(&Some("00000000-0000-4000-8000-00000000beef".to_owned())),
        "a recent claim is left alone"
    );
}

/// A transaction left open on a dead process's unit (a fenced write of a process that then
/// stopped) never stalls the sweep, which every process's loop runs: the unit is skipped and freed by
/// a later sweep once the transaction ends.
#[test]
fn a_transaction_left_open_on_a_dead_processs_unit_never_stalls_the_sweep() {
    let fleet = Fleet::new(2);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let held = a.owned()[0].clone();
    client()
        .batch_execute(&format!(
            "UPDATE {} SET claimed_at = now() - interval '1 hour'",
            fleet.units_table
        ))
        .unwrap();
    let mut holder = client();
    let mut tx = holder.transaction().unwrap();
    assert!(a.fence(&mut tx, &held).unwrap());
    // A dies long ago, by the database's account, its fenced transaction still open.
    client()
        .batch_execute(&format!(
            "UPDATE {} SET expires_at = now() - interval '1 hour' WHERE process_id = '{}'",
            fleet.processes,
            a.process_id()
        ))
        .unwrap();
    let b = Arc::new(b);
    let sweeper = b.clone();
    let swept = returns_within(Duration::from_secs(3), move || sweeper.sweep().unwrap())
        .expect("the sweep waited for the open transaction");
    assert_eq!(
        (swept.processes, swept.units),
        (1, 1),
        "the other unit is freed"
    );
    assert!(fleet.ownership()[&Some(a.process_id().to_owned())].contains(&held));
    tx.commit().unwrap();
    assert_eq!(
        b.sweep().unwrap().units,
        1,
        "freed once the transaction ended"
    );
    assert!(!fleet
        .ownership()
        .contains_key(&Some(a.process_id().to_owned())));
}

/// A process whose row was deleted (swept while it was away) learns at its next heartbeat that its
/// units may be elsewhere, although it never saw the row expire.
#[test]
fn a_heartbeat_that_finds_its_row_gone_reports_every_unit_lost() {
    let fleet = Fleet::new(3);
    let (a, recorder) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 3);
    client()
        .batch_execute(&format!(
            "DELETE FROM {} WHERE process_id = '{}'; UPDATE {} SET process_id = NULL",
            fleet.processes,
            a.process_id(),
            fleet.units_table
        ))
        .unwrap();
    a.heartbeat().unwrap();
    assert_eq!(recorder.lost_for(UnitLoss::Expired), 3);
    assert!(a.owned().is_empty());
    // It re-reads and claims them back, as a new tenure.
    assert_eq!(a.tick().unwrap().owned, 3);
}
