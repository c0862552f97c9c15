//! Processes that crash, leave, lapse, start before the database, and tables whose names collide.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::{database_addr, server_addr, Proxy};
use crate::common::{client, db, wait_for, Tables};
use pgtenure::membership::{Leaser, NoHooks, Reconciler, Unit, UnitLoss, Units};

use super::{assert_disjoint, config, round, Fleet, Recorder};

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

#[test]
fn run_starts_while_the_database_is_unreachable_and_stops_promptly() {
    let fleet = Fleet::new(10);
    let port = Proxy::free_port();
    let via = crate::common::config_at("127.0.0.1", port);
    let lazy = pgtenure::DbBuilder::from_config(via)
        .connection_timeout(Duration::from_millis(300))
        .unwrap()
        .build_lazy()
        .unwrap();
    let mut cfg = config(Duration::from_secs(3));
    cfg.rebalance_interval = Duration::from_millis(100);
    let leaser = Arc::new(
        Leaser::new(&lazy, Arc::new(Recorder::default()), cfg, Arc::new(NoHooks))
            .unwrap()
            .with_tables(&fleet.processes, &fleet.units_table)
            .unwrap(),
    );
    let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let runner = {
        let leaser = leaser.clone();
        thread::spawn(move || leaser.run(&shutdown))
    };
    thread::sleep(Duration::from_millis(1500));
    assert!(!leaser.ready(), "no database yet");
    assert!(
        !runner.is_finished(),
        "an unreachable database delays run, it does not stop it"
    );
    let proxy = Proxy::start(port, database_addr()).unwrap();
    wait_for("run to become ready", Duration::from_secs(15), || {
        leaser.ready().then_some(())
    });
    wait_for("run to claim the units", Duration::from_secs(5), || {
        (leaser.owned().len() == 10).then_some(())
    });
    let signalled = Instant::now();
    drop(stop);
    runner.join().unwrap().unwrap();
    let took = signalled.elapsed();
    assert!(took < Duration::from_secs(1), "run took {took:?} to stop");
    drop(proxy);
}

#[test]
fn derived_index_names_that_collide_are_refused_or_reported_never_skipped() {
    let mut tables = Tables::new();
    let units_t = tables.name("u");
    // The units table's owner index would be named like the processes table.
    let err = Units::new(&db())
        .with_tables(&format!("{units_t}_owner"), &units_t)
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    // A relation of the fleet's own that takes an index's name is reported by create_tables.
    let procs = tables.name("procs");
    let taken = format!("{units_t}_claimable");
    tables.track(&taken);
    client()
        .batch_execute(&format!("CREATE TABLE {taken} (x int)"))
        .unwrap();
    let err = Units::new(&db())
        .with_tables(&procs, &units_t)
        .unwrap()
        .create_tables()
        .unwrap_err();
    assert!(err.to_string().contains(&taken), "{err}");
    assert_eq!(err.kind(), pgtenure::ErrorKind::Database);
    // The same for a lease table's token sequence.
    let leases_t = tables.name("lease");
    tables.track(&format!("{leases_t}_token_seq"));
    client()
        .batch_execute(&format!("CREATE TABLE {leases_t}_token_seq (x int)"))
        .unwrap();
    let err = pgtenure::Leases::new(&db())
        .with_table(&leases_t)
        .unwrap()
        .create_table()
        .unwrap_err();
    assert!(err.to_string().contains("token_seq"), "{err}");
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
    // The heartbeat goes late in A's term, so the deadline it sets is still ahead when it returns.
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

/// A give-back whose answer was lost (it landed) and whose resend failed leaves its units pending in
/// the leaser. The next tick re-reads: those units are no longer this process's, must not be counted
/// claimable twice, and if claimed again must not be given back from under their new work.
#[test]
fn a_give_back_that_landed_unseen_is_neither_counted_twice_nor_repeated() {
    let fleet = Fleet::new(10);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let db = pgtenure::DbBuilder::from_config(proxy.config())
        .max_size(1)
        .unwrap()
        .connection_timeout(Duration::from_millis(300))
        .unwrap()
        .build()
        .unwrap();
    let a = fleet.leaser_with(
        &db,
        Arc::new(Recorder::default()),
        config(Duration::from_secs(30)),
    );
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 10);
    b.heartbeat().unwrap();
    // A sheds half: the give-back commits, its answer is lost, and sending it again finds no
    // connection in time.
    proxy.lose_answer("JOIN unnest($2::text[], $3::integer[]) AS s");
    proxy.set_connect_delay(Duration::from_secs(2));
    assert!(a.tick().is_err(), "the give-back's outcome is unknown");
    assert!(!proxy.fin_armed(), "the give-back was sent");
    proxy.set_connect_delay(Duration::ZERO);
    assert_eq!(fleet.ownership()[&None].len(), 5, "the give-back landed");
    wait_for("A's pool to connect again", Duration::from_secs(10), || {
        a.heartbeat().ok()
    });
    for _ in 0..3 {
        a.tick().unwrap();
        assert_disjoint(&fleet, &[&a]);
    }
    assert_eq!(
        a.owned().len(),
        5,
        "A's fair share, not a double-counted one"
    );
}

/// An operator's statement that locks a unit and then its owner's row, against a leaser's that
/// locks the row and then the unit: PostgreSQL rolls one back to break the deadlock. The leaser's
/// did not run, so it is sent again and succeeds.
///
/// The server looks for a deadlock once, in the session whose `deadlock_timeout` runs out first
/// while it waits, and rolls that session back. The leaser's sessions look after 5 s and the
/// operator's after 60 s, so the operator's statement only has to start waiting within 5 s of the
/// leaser's (1 s, the default, was too little on a loaded machine: the operator was rolled back).
#[test]
fn a_statement_rolled_back_to_break_a_deadlock_is_sent_again() {
    let fleet = Fleet::new(1);
    let app = format!("deadlocked_{}", std::process::id());
    let (a, _) = fleet.leaser_named_with(
        &app,
        Some("-c deadlock_timeout=5s"),
        config(Duration::from_secs(30)),
    );
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 1);
    let mut operator = client();
    let mut tx = fleet.hold_units(&mut operator);
    tx.batch_execute("SET LOCAL deadlock_timeout = '60s'")
        .unwrap();
    thread::scope(|scope| {
        // Deletes the process row (locking it), then waits to free the unit.
        let deleting = scope.spawn(|| a.delete_process());
        wait_for(
            "the delete to wait for the unit",
            Duration::from_secs(5),
            || Fleet::waits_for_a_lock(&app).then_some(()),
        );
        // Now the operator waits for the row: a deadlock, which the delete detects first.
        tx.execute(
            &format!(
                "UPDATE {} SET changes = changes + 1 WHERE process_id = $1::text::uuid",
                fleet.processes
            ),
            &[&a.process_id()],
        )
        .unwrap();
        tx.commit().unwrap();
        deleting
            .join()
            .unwrap()
            .expect("the delete was rolled back to break the deadlock, then sent again");
    });
    let rows = crate::common::count(&mut client(), &fleet.processes);
    assert_eq!(rows, 0, "the process row is gone");
    assert_eq!(fleet.ownership()[&None].len(), 1, "the unit is free");
}

/// An operator removes a unit its owner works on and adds it again before the owner's next tick: the
/// unit must not come back as a new claimable unit beside its owner, or two processes work on it.
#[test]
fn a_unit_removed_and_added_again_while_owned_keeps_one_owner() {
    let fleet = Fleet::new(2);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    assert_eq!(a.owned().len(), 2);
    b.heartbeat().unwrap();
    let unit = a.owned()[0].clone();
    assert_eq!(fleet.units.remove(std::slice::from_ref(&unit)).unwrap(), 1);
    assert_eq!(fleet.units.add(std::slice::from_ref(&unit)).unwrap(), 1);
    // B ticks before A learns anything: nothing of A's is claimable.
    let step = b.tick().unwrap();
    assert!(
        !b.owned().contains(&unit),
        "B claimed {unit} while A works on it: {step:?}"
    );
    for _ in 0..3 {
        round(&[&a, &b]);
        assert_disjoint(&fleet, &[&a, &b]);
    }
}

/// A removed unit that its owner had: the owner stops, gives it back, and it is gone; one removed
/// without a live owner is gone at once.
#[test]
fn a_removed_unit_is_given_back_by_its_owner_and_then_gone() {
    let fleet = Fleet::new(3);
    let (a, recorder) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let unit = a.owned()[0].clone();
    fleet.units.add(&[Unit::new("free", 1).unwrap()]).unwrap();
    assert_eq!(
        fleet
            .units
            .remove(&[unit.clone(), Unit::new("free", 1).unwrap(), unit.clone()])
            .unwrap(),
        2,
        "each unit counts once"
    );
    let rows = crate::common::count(&mut client(), &fleet.units_table);
    assert_eq!(
        rows, 3,
        "the unowned one is gone at once, the owned one kept for its owner"
    );
    assert!(
        !fleet.units.set_weight(&unit, 5).unwrap(),
        "a removed unit is not registered"
    );
    let step = a.tick().unwrap();
    assert_eq!(step.lost, vec![unit.clone()]);
    assert_eq!(step.shed, 1);
    let rows = crate::common::count(&mut client(), &fleet.units_table);
    assert_eq!(rows, 2, "given back, and so gone");
    assert_eq!(
        *recorder.losses.lock().last().unwrap(),
        (UnitLoss::Removed, vec![unit.clone()]),
        "told why"
    );
}

/// A removal that waited for a lock judges each unit on its latest version: a unit that a new
/// process claimed meanwhile (its row newer than the removal's snapshot) is marked removed, not
/// deleted, and that process is told (it re-reads), so the unit never has two owners.
#[test]
fn a_removal_that_waited_tells_an_owner_newer_than_its_snapshot() {
    let fleet = Fleet::new(0);
    let (w, u) = (Unit::new("a", 1).unwrap(), Unit::new("b", 1).unwrap());
    fleet.units.add(&[w.clone(), u.clone()]).unwrap();
    let mut blocker = client();
    let mut tx = blocker.transaction().unwrap();
    tx.execute(
        &format!(
            "SELECT 1 FROM {} WHERE tenant = 'a' FOR UPDATE",
            fleet.units_table
        ),
        &[],
    )
    .unwrap();
    let app = format!("remover_{}", std::process::id());
    let mut connect: pgtenure::postgres::Config = crate::common::direct_url().parse().unwrap();
    connect.application_name(&app);
    let remover = Units::new(&pgtenure::DbBuilder::from_config(connect).build().unwrap())
        .with_tables(&fleet.processes, &fleet.units_table)
        .unwrap();
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    thread::scope(|scope| {
        let removing = scope.spawn(|| remover.remove(&[w.clone(), u.clone()]));
        wait_for("the removal to wait for a", Duration::from_secs(5), || {
            Fleet::waits_for_a_lock(&app).then_some(())
        });
        // A new process joins and claims b (a is locked) while the removal waits.
        b.heartbeat().unwrap();
        b.tick().unwrap();
        assert_eq!(b.owned(), vec![u.clone()]);
        tx.commit().unwrap();
        assert_eq!(removing.join().unwrap().unwrap(), 2);
    });
    b.heartbeat().unwrap();
    let step = b.tick().unwrap();
    assert!(
        !b.owned().contains(&u),
        "B still works on the removed unit: {step:?}"
    );
    let rows = crate::common::count(&mut client(), &fleet.units_table);
    assert_eq!(rows, 0, "both units gone");
}

/// A process row deleted while an operator registers one of its removed units again: the unit is
/// freed by its latest version (registered again), never left pointing at the deleted row, where
/// nobody could ever claim it.
#[test]
fn a_unit_registered_again_while_its_process_is_deleted_is_freed() {
    let fleet = Fleet::new(1);
    let app = format!("deleting_{}", std::process::id());
    let (a, _) = fleet.leaser_named(&app, config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let unit = a.owned()[0].clone();
    assert_eq!(fleet.units.remove(std::slice::from_ref(&unit)).unwrap(), 1);
    // The operator's add, held open: the unit is locked and registered again when it commits.
    let mut operator = client();
    let mut tx = fleet.hold_units(&mut operator);
    thread::scope(|scope| {
        let deleting = scope.spawn(|| a.delete_process());
        wait_for(
            "the delete to wait for the unit",
            Duration::from_secs(5),
            || Fleet::waits_for_a_lock(&app).then_some(()),
        );
        tx.execute(
            &format!(
                "UPDATE {} SET removed = false, weight = 1",
                fleet.units_table
            ),
            &[],
        )
        .unwrap();
        tx.commit().unwrap();
        deleting.join().unwrap().unwrap();
    });
    let owners = fleet.ownership();
    assert_eq!(
        owners.get(&None),
        Some(&BTreeSet::from([unit])),
        "the unit is claimable: {owners:?}"
    );
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

/// A loop that cannot work says so: against tables that do not exist, `run` ends at once with the
/// error (it used to retry with backoff forever and return `Ok` at shutdown), and a loop stopped
/// before its database ever answered returns the last error, not `Ok`.
#[test]
fn run_ends_with_a_permanent_error_and_never_returns_ok_after_failing_all_along() {
    let mut tables = Tables::new();
    let missing = Leaser::new(
        &crate::common::db(),
        Arc::new(Recorder::default()),
        config(Duration::from_secs(3)),
        Arc::new(NoHooks),
    )
    .unwrap()
    .with_tables(&tables.name("no_procs"), &tables.name("no_units"))
    .unwrap();
    let (_stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let started = Instant::now();
    let err = missing.run(&shutdown).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), pgtenure::ErrorKind::Database, "{err}");
    assert_eq!(err.code().map(|c| c.code()), Some("42P01"), "{err}");

    let nowhere =
        pgtenure::DbBuilder::from_config(crate::common::config_at("127.0.0.1", Proxy::free_port()))
            .connection_timeout(Duration::from_millis(200))
            .unwrap()
            .build_lazy()
            .unwrap();
    let unreachable = Leaser::new(
        &nowhere,
        Arc::new(Recorder::default()),
        config(Duration::from_secs(3)),
        Arc::new(NoHooks),
    )
    .unwrap();
    // Signalled from the start: the first heartbeat fails, and the loop stops with its error.
    let (stop, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    drop(stop);
    let err = unreachable.run(&shutdown).unwrap_err();
    assert!(err.is_connection(), "{err}");
}

/// `units_lost` says why: units freed from under a live process read as taken, a graceful release
/// as released.
#[test]
fn units_lost_says_taken_when_the_database_freed_them_and_released_at_shutdown() {
    let fleet = Fleet::new(4);
    let (a, recorder) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    assert_eq!(a.tick().unwrap().owned, 4);
    // An operator frees two units and tells the owner (as `Units::remove` does for its owners).
    let freed: Vec<Unit> = a.owned().into_iter().take(2).collect();
    client()
        .batch_execute(&format!(
            "UPDATE {units} SET process_id = NULL WHERE (tenant, shard) IN (('{}', {}), ('{}', {}));
             UPDATE {procs} SET changes = changes + 1",
            freed[0].tenant,
            freed[0].shard,
            freed[1].tenant,
            freed[1].shard,
            units = fleet.units_table,
            procs = fleet.processes,
        ))
        .unwrap();
    let step = a.tick().unwrap();
    assert_eq!(
        recorder.losses.lock()[0],
        (UnitLoss::Taken, freed.clone()),
        "{step:?}"
    );
    // The same tick claims them back (the fleet has only this process): a new tenure, with new
    // tokens, told as gained after the loss.
    assert_eq!(step.gained, freed);
    assert!(freed.iter().all(|u| a.token(u).is_some()));
    a.release().unwrap();
    let losses = recorder.losses.lock();
    assert_eq!(losses.last().unwrap().0, UnitLoss::Released);
    assert_eq!(losses.last().unwrap().1.len(), 4);
}

/// An operator's plain `UPDATE` (no change counter moved) that hands one of A's units to another
/// live process B, sets another unowned, and rewrites a third one's token in place is adopted at
/// the next tick: A is told the first two were taken and stops owning them, the third is a new
/// tenure (taken, then gained under the new token), and B gains the first. A steady tick stays one
/// statement (one round trip), and the tick that finds the change adds only the re-read.
#[test]
fn units_changed_by_an_operators_update_are_taken_from_their_owner_at_its_next_tick() {
    let fleet = Fleet::new(8);
    // A's statements are counted on their way to the server itself: behind PgBouncer a session
    // moved to a server connection that lacks a statement pays two more round trips to prepare it.
    let proxy = Proxy::start(0, server_addr()).unwrap();
    let through_proxy = pgtenure::DbBuilder::from_config(proxy.config())
        .max_size(1)
        .unwrap()
        .build()
        .unwrap();
    let (a_told, b_told) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let a = fleet.leaser_with(
        &through_proxy,
        a_told.clone(),
        config(Duration::from_secs(30)),
    );
    let b = fleet.leaser_with(&db(), b_told.clone(), config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    b.heartbeat().unwrap();
    // Settle: A sheds half to B.
    for _ in 0..3 {
        round(&[&a, &b]);
    }
    assert_eq!((a.owned().len(), b.owned().len()), (4, 4));
    let before = proxy.round_trips();
    a.tick().unwrap();
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "a steady tick is one statement"
    );

    let mine = a.owned();
    let (moved, freed, retokened) = (&mine[0], &mine[1], &mine[2]);
    let old_token = a.token(retokened).unwrap();
    let moved_token = a.token(moved).unwrap();
    let freed_token = a.token(freed).unwrap();
    client()
        .batch_execute(&format!(
            "UPDATE {units} SET process_id = '{b}' WHERE tenant = '{}' AND shard = {};
             UPDATE {units} SET process_id = NULL WHERE tenant = '{}' AND shard = {};
             UPDATE {units} SET token = token + 1000 WHERE tenant = '{}' AND shard = {}",
            moved.tenant,
            moved.shard,
            freed.tenant,
            freed.shard,
            retokened.tenant,
            retokened.shard,
            units = fleet.units_table,
            b = b.process_id(),
        ))
        .unwrap();
    a.heartbeat().unwrap();
    let before = proxy.round_trips();
    let step = a.tick().unwrap();
    let owned = a.owned();
    assert!(
        !owned.contains(moved),
        "A still owns what the operator moved: {owned:?} ({step:?})"
    );
    // The freed unit is claimable: A, below its share, may claim it back in the same tick, as a
    // new tenure.
    assert!(
        !owned.contains(freed)
            || (step.gained.contains(freed) && a.token(freed) > Some(freed_token)),
        "A still owns the unit the operator freed under its old token: {step:?}"
    );
    let losses = a_told.losses.lock().clone();
    let taken = losses.last().expect("A was told");
    assert_eq!(taken.0, UnitLoss::Taken);
    let mut expected = vec![moved.clone(), freed.clone(), retokened.clone()];
    expected.sort();
    assert_eq!(taken.1, expected, "{losses:?}");
    assert!(
        step.gained.contains(retokened),
        "a token rewritten in place is a new tenure: {step:?}"
    );
    assert_eq!(a.token(retokened), Some(old_token + 1000));
    // The statements: the stats read, the re-read; and the claim of the freed unit, if A took it
    // back (it is below its share).
    let trips = proxy.round_trips() - before;
    assert!(
        trips == 2 + u64::from(step.claimed > 0),
        "{trips} round trips for {step:?}"
    );
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(a.fence(&mut tx, retokened).unwrap(), "the new token passes");
    assert!(!a.fence(&mut tx, moved).unwrap(), "a moved unit is refused");
    tx.commit().unwrap();

    b.heartbeat().unwrap();
    let step = b.tick().unwrap();
    assert!(
        step.gained.contains(moved),
        "B gains the moved unit: {step:?}"
    );
    assert_eq!(b.token(moved), Some(moved_token), "under the row's token");
    let before = proxy.round_trips();
    a.tick().unwrap();
    let settled = proxy.round_trips() - before;
    assert!(settled <= 2, "{settled} round trips once settled again");
    assert_disjoint(&fleet, &[&a, &b]);
    drop(b_told);
}

/// An operator's `UPDATE` changes nothing until it commits, however long ago it was sent: one that
/// hands a unit of A's to B but waits for the row lock of A's fenced write, still open, leaves the
/// unit A's through any number of A's ticks meanwhile (the database still says so), and A's first
/// tick that starts after the commit reports the unit taken. So a check of "the old owner let go"
/// counts ticks from the change's commit, not from when it was sent (the membership checker did
/// the latter, and flagged ticks that had read the database before the commit).
#[test]
fn an_operators_update_is_adopted_by_the_first_tick_that_starts_after_it_commits() {
    let fleet = Fleet::new(4);
    let (a, told) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    wait_for(
        "A and B to own 2 units each",
        Duration::from_secs(10),
        || (round(&[&a, &b]) == [2, 2]).then_some(()),
    );
    let unit = a.owned()[0].clone();
    let token = a.token(&unit).unwrap();
    // A fenced write of A's, left open: it holds the unit's row FOR SHARE.
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(a.fence(&mut tx, &unit).unwrap());
    let update = {
        let (units, owner, to, unit) = (
            fleet.units_table.clone(),
            a.process_id().to_owned(),
            b.process_id().to_owned(),
            unit.clone(),
        );
        thread::spawn(move || {
            client().execute(
                &format!(
                    "UPDATE {units} SET process_id = $4::text::uuid
                      WHERE tenant = $1 AND shard = $2 AND process_id = $3::text::uuid"
                ),
                &[&unit.tenant, &unit.shard, &owner, &to],
            )
        })
    };
    let marker = format!("%UPDATE {}%", fleet.units_table);
    wait_for(
        "the operator's UPDATE to wait for the fenced write",
        Duration::from_secs(10),
        || {
            let waiting: i64 = client()
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                      WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    &[&marker],
                )
                .unwrap()
                .get(0);
            (waiting == 1).then_some(())
        },
    );
    let losses = told.losses.lock().len();
    for _ in 0..2 {
        round(&[&a]);
        assert_eq!(
            a.token(&unit),
            Some(token),
            "the UPDATE has not committed: the unit is still A's"
        );
    }
    assert_eq!(told.losses.lock().len(), losses, "nothing was lost yet");
    tx.commit().unwrap();
    drop(conn);
    assert_eq!(update.join().unwrap().unwrap(), 1, "the UPDATE committed");
    round(&[&a]);
    assert_eq!(
        a.token(&unit),
        None,
        "A still holds the unit the operator moved"
    );
    let losses = told.losses.lock().clone();
    assert_eq!(
        losses.last(),
        Some(&(UnitLoss::Taken, vec![unit.clone()])),
        "{losses:?}"
    );
}

/// A unit's fence passes for its owner under the token of its claim, and fails once the unit was
/// claimed anew by another process, even while the old owner's view still lists it.
#[test]
fn a_fenced_write_passes_for_the_owner_and_is_refused_once_the_unit_moved() {
    let fleet = Fleet::new(1);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    let unit = a.owned()[0].clone();
    let token = a.token(&unit).expect("a token for an owned unit");
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(a.fence(&mut tx, &unit).unwrap(), "the owner passes");
    assert!(
        !b.fence(&mut tx, &unit).unwrap(),
        "another process does not"
    );
    tx.commit().unwrap();

    // The unit moves under A's feet (its row made to look expired, then B claims), while A's own
    // view, not yet re-read, still lists it under the old token.
    client()
        .batch_execute(&format!(
            "UPDATE {} SET expires_at = now() - interval '1 s' WHERE process_id = '{}'",
            fleet.processes,
            a.process_id()
        ))
        .unwrap();
    b.heartbeat().unwrap();
    assert_eq!(b.tick().unwrap().claimed, 1);
    assert!(
        b.token(&unit).unwrap() > token,
        "a later claim, a larger token"
    );
    assert_eq!(a.token(&unit), Some(token));
    let mut tx = conn.transaction().unwrap();
    assert!(
        !a.fence(&mut tx, &unit).unwrap(),
        "the old owner is refused"
    );
    assert!(b.fence(&mut tx, &unit).unwrap(), "the new one passes");
    tx.commit().unwrap();
}

/// The operators' views: every unit with its owner and token, every process with what it reports.
#[test]
fn assignments_and_processes_show_who_owns_what() {
    let fleet = Fleet::new(4);
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    for leaser in [&a, &b] {
        leaser.heartbeat().unwrap();
    }
    round(&[&a, &b]);
    round(&[&a, &b]);
    let assignments = fleet.units.assignments().unwrap();
    assert_eq!(assignments.len(), 4);
    for row in &assignments {
        let owner = row.owner.as_deref().expect("every unit is owned");
        let leaser = if owner == a.process_id() { &a } else { &b };
        assert_eq!(leaser.process_id(), owner);
        assert!(row.owner_live && row.claimed_at.is_some() && row.weight == 1);
        assert_eq!(row.token, leaser.token(&row.unit), "{row:?}");
    }
    let processes = fleet.units.processes().unwrap();
    assert_eq!(processes.len(), 2);
    for p in &processes {
        assert!(p.live && p.expires_at > p.started_at, "{p:?}");
        assert_eq!((p.units, p.weight), (2, 2), "{p:?}");
        assert_eq!(p.hostname, a.config().hostname);
    }
}

/// `spawn` owns the loop's thread: the units are claimed, a second `run` of the same leaser is
/// refused, and `stop` hands every unit over and deletes the process row.
#[test]
fn a_spawned_leaser_runs_refuses_a_second_loop_and_hands_over_on_stop() {
    let fleet = Fleet::new(6);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let (a, recorder) = fleet.leaser(fast);
    let running = a.spawn().unwrap();
    wait_for("the spawned loop to claim", Duration::from_secs(10), || {
        (running.owned().len() == 6).then_some(())
    });
    let (_never, shutdown) = pgtenure::crossbeam_channel::bounded::<()>(0);
    let second = running.run(&shutdown).unwrap_err();
    assert!(second.is_invalid_input(), "{second}");
    assert!(second.to_string().contains("already running"), "{second}");
    assert!(!running.is_finished());
    let id = running.process_id().to_owned();
    running.stop().unwrap();
    assert_eq!(recorder.lost_for(UnitLoss::Released), 6);
    let ownership = fleet.ownership();
    assert_eq!(ownership[&None].len(), 6, "every unit handed over");
    assert!(!ownership.contains_key(&Some(id.clone())));
    assert!(
        fleet.units.processes().unwrap().iter().all(|p| p.id != id),
        "the process row is gone"
    );
}

/// Runs `f` on a thread and says whether it returned within `within` (a hung call is left behind).
fn returns_within<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(within).ok()
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

/// A transaction left open on a unit the process is shedding does not hold up its tick (which the
/// membership loop runs between heartbeats): the give-back skips it and comes back to it later.
#[test]
fn a_transaction_left_open_on_a_unit_being_shed_never_holds_up_the_tick() {
    let fleet = Fleet::new(2);
    let (a, recorder) = fleet.leaser(config(Duration::from_secs(30)));
    let (b, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    a.tick().unwrap();
    b.heartbeat().unwrap();
    let mut holder = client();
    let mut tx = holder.transaction().unwrap();
    for unit in a.owned() {
        assert!(a.fence(&mut tx, &unit).unwrap());
    }
    let a = Arc::new(a);
    let ticker = a.clone();
    let step = returns_within(Duration::from_secs(3), move || ticker.tick().unwrap())
        .expect("the tick waited for the open transaction");
    assert_eq!(step.shed, 0, "nothing given back while the row is locked");
    assert_eq!(
        recorder.lost_for(UnitLoss::Shed),
        1,
        "but the unit was told lost"
    );
    tx.commit().unwrap();
    let step = a.tick().unwrap();
    assert_eq!(step.shed, 1, "given back at the next tick");
    assert_eq!(step.owned, 1);
    b.tick().unwrap();
    assert_disjoint(&fleet, &[&a, &b]);
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

/// A reconciler that panics ends the loop instead of hanging it: `stop` returns an error and the
/// leaser can run again.
#[test]
fn a_panicking_reconciler_ends_the_loop_and_stop_says_so() {
    struct Panics;
    impl Reconciler for Panics {
        fn units_gained(&self, _: &[Unit]) {
            panic!("the reconciler's own bug");
        }
        fn units_lost(&self, _: &[Unit], _: UnitLoss) {}
    }
    let fleet = Fleet::new(2);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let running = fleet
        .leaser_with(&db(), Arc::new(Panics), fast)
        .spawn()
        .unwrap();
    let ended = (0..100).any(|_| {
        thread::sleep(Duration::from_millis(50));
        running.is_finished()
    });
    if !ended {
        // Dropping it would wait for the hung loop.
        std::mem::forget(running);
        panic!("the loop hung after the reconciler panicked");
    }
    let err = running.stop().unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
}

/// A second `spawn_shared` of a running leaser is refused before anything starts: the running
/// loop keeps its units.
#[test]
fn a_second_spawn_of_a_running_leaser_is_refused_and_changes_nothing() {
    let fleet = Fleet::new(2);
    let mut fast = config(Duration::from_secs(3));
    fast.heartbeat_interval = Duration::from_millis(200);
    fast.rebalance_interval = Duration::from_millis(100);
    let (a, _) = fleet.leaser(fast);
    let a = Arc::new(a);
    let running = a.clone().spawn_shared().unwrap();
    wait_for("the loop to claim", Duration::from_secs(10), || {
        (running.owned().len() == 2).then_some(())
    });
    let err = a.clone().spawn_shared().unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert_eq!(a.owned().len(), 2, "the running loop keeps its units");
    running.stop().unwrap();
    assert!(
        a.clone().spawn_shared().is_ok(),
        "stopped, it may run again"
    );
}
