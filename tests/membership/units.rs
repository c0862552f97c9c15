//! Units changed under their owners: operators removing, adding back and updating them, or locking
//! them against a leaser's statements; fenced writes and transactions left open on them; a
//! give-back whose answer was lost; why `units_lost` says they went; the operators' views.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::proxy::{database_addr, server_addr, Proxy};
use crate::common::{client, db, wait_for};
use pgtenure::membership::{Unit, UnitLoss, Units};

use super::{assert_disjoint, config, returns_within, round, Fleet, Recorder};

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
    // With the default probation, a process settles at its second heartbeat.
    let mut probation = config(Duration::from_secs(30));
    probation.warm_up = None;
    let (newcomer, _) = fleet.leaser(probation);
    let settled = |id: &str| {
        let processes = fleet.units.processes().unwrap();
        processes.iter().find(|p| p.id == id).map(|p| p.settled)
    };
    newcomer.heartbeat().unwrap();
    assert_eq!(settled(newcomer.process_id()), Some(false), "first beat");
    newcomer.heartbeat().unwrap();
    assert_eq!(settled(newcomer.process_id()), Some(true), "second beat");
    newcomer.delete_process().unwrap();
    assert_eq!(
        settled(a.process_id()),
        Some(true),
        "no probation: settled at once"
    );
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

/// `unowned` counts the enabled units no live process owns: never claimed, then none once claimed,
/// then again those of a process that expired; a disabled unit is never counted.
#[test]
fn unowned_counts_enabled_units_without_a_live_owner() {
    let fleet = Fleet::new(4);
    let unowned = |fleet: &Fleet| {
        let u = fleet.units.unowned().unwrap();
        (u.units, u.weight)
    };
    let disabled = fleet.units.assignments().unwrap()[0].unit.clone();
    assert!(fleet.units.set_weight(&disabled, 0).unwrap());
    let heavy = fleet.units.assignments().unwrap()[1].unit.clone();
    assert!(fleet.units.set_weight(&heavy, 5).unwrap());
    assert_eq!(
        unowned(&fleet),
        (3, 7),
        "never claimed: all but the disabled one"
    );
    let (a, _) = fleet.leaser(config(Duration::from_secs(30)));
    a.heartbeat().unwrap();
    round(&[&a]);
    assert_eq!(a.owned().len(), 3);
    assert_eq!(
        unowned(&fleet),
        (0, 0),
        "every enabled unit owned by a live process"
    );
    client()
        .batch_execute(&format!(
            "UPDATE {} SET expires_at = now() - interval '1 s' WHERE process_id = '{}'",
            fleet.processes,
            a.process_id()
        ))
        .unwrap();
    assert_eq!(
        unowned(&fleet),
        (3, 7),
        "an expired owner's units are claimable"
    );
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
