//! Leadership as a loop (`Elector::campaign`) against a real PostgreSQL: events in order, one
//! leader at a time, failover after a stop, a resignation request, a partition and a crash.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::proxy::{database_addr, Proxy};
use common::{db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::{
    Db, DbBuilder, Elector, LeaderEvent, LeaderHooks, LeaderLoss, Leadership, NoLeaderHooks,
};

const TTL: Duration = Duration::from_millis(900);
const RETRY: Duration = Duration::from_millis(150);

fn table(tables: &mut Tables) -> String {
    common::leader_table(tables)
}

fn elector_on(db: &Db, table: &str, holder: &str) -> Elector {
    Elector::new(db)
        .with_table(table)
        .unwrap()
        .with_name("fleet")
        .unwrap()
        .with_holder(holder)
        .unwrap()
        .with_ttl(TTL)
        .unwrap()
        .with_retry_period(RETRY)
        .unwrap()
}

/// Every event a campaign reported so far, without waiting.
fn drain(leadership: &Leadership) -> Vec<LeaderEvent> {
    leadership.events().try_iter().collect()
}

/// Waits until exactly one of `members` leads; returns its index.
fn one_leader(members: &[&Leadership], within: Duration) -> usize {
    wait_for("one leader", within, || {
        let leading: Vec<usize> = (0..members.len())
            .filter(|i| members[*i].is_leading())
            .collect();
        (leading.len() == 1).then(|| leading[0])
    })
}

/// Samples `is_leading` of every member until `stop`: never two at once.
fn watch_for_two(
    members: Vec<Arc<Mutex<Option<Leadership>>>>,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut samples = 0;
        while !stop.load(Ordering::SeqCst) {
            let leading = members
                .iter()
                .filter(|m| m.lock().as_ref().is_some_and(Leadership::is_leading))
                .count();
            assert!(leading <= 1, "{leading} members lead at once");
            samples += 1;
            thread::sleep(Duration::from_millis(2));
        }
        samples
    })
}

#[test]
fn three_campaigns_elect_one_leader_and_hand_over_on_stop_and_on_request() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let members: Vec<Arc<Mutex<Option<Leadership>>>> = (0..3)
        .map(|i| {
            let campaign = elector_on(&db(), &table, &format!("node-{i}"))
                .campaign()
                .unwrap();
            Arc::new(Mutex::new(Some(campaign)))
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = watch_for_two(members.clone(), stop.clone());
    let leader = {
        let guards: Vec<_> = members.iter().map(|m| m.lock()).collect();
        let refs: Vec<&Leadership> = guards.iter().map(|g| g.as_ref().unwrap()).collect();
        one_leader(&refs, Duration::from_secs(5))
    };
    let first_term = {
        let guard = members[leader].lock();
        let campaign = guard.as_ref().unwrap();
        let term = campaign.term().unwrap();
        assert_eq!(drain(campaign)[0], LeaderEvent::Elected { term });
        term
    };
    // Every follower observes who leads.
    for (i, member) in members.iter().enumerate().filter(|(i, _)| *i != leader) {
        let guard = member.lock();
        let campaign = guard.as_ref().unwrap();
        wait_for("the leader observed", Duration::from_secs(5), || {
            campaign.events().try_iter().find_map(|e| match e {
                LeaderEvent::Observed(Some(l)) if l.term == first_term => Some(()),
                LeaderEvent::Elected { .. } => panic!("follower {i} elected"),
                _ => None,
            })
        });
    }

    // A graceful stop: Lost { Stopped } on the old leader, a new leader within one retry period
    // (plus a poll's round trip).
    let stopped = members[leader].lock().take().unwrap();
    let t0 = Instant::now();
    let events = stopped.events().clone();
    stopped.stop().unwrap();
    assert_eq!(
        events.try_iter().last(),
        Some(LeaderEvent::Lost {
            term: first_term,
            reason: LeaderLoss::Stopped
        })
    );
    let next = {
        let guards: Vec<_> = members.iter().map(|m| m.lock()).collect();
        let live: Vec<(usize, &Leadership)> = guards
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.as_ref().map(|c| (i, c)))
            .collect();
        let refs: Vec<&Leadership> = live.iter().map(|(_, c)| *c).collect();
        let at = one_leader(&refs, RETRY * 4 + Duration::from_secs(1));
        live[at].0
    };
    let handover = t0.elapsed();
    println!("hand-over after stop: {handover:?}");
    assert!(handover < RETRY + Duration::from_secs(1), "{handover:?}");
    let second_term = members[next].lock().as_ref().unwrap().term().unwrap();
    assert!(second_term > first_term);

    // A resignation request from a follower: the leader reports it, another member wins.
    let follower = (0..3)
        .find(|i| *i != next && members[*i].lock().is_some())
        .unwrap();
    let t0 = Instant::now();
    assert!(members[follower]
        .lock()
        .as_ref()
        .unwrap()
        .elector()
        .request_resign()
        .unwrap());
    let resigned = members[next].lock().take().unwrap();
    let lost = wait_for(
        "the leader to step down",
        RETRY * 4 + Duration::from_secs(1),
        || {
            resigned.events().try_iter().find_map(|e| match e {
                LeaderEvent::Lost { term, reason } => Some((term, reason)),
                _ => None,
            })
        },
    );
    assert_eq!(lost, (second_term, LeaderLoss::ResignRequested));
    assert!(!resigned.is_leading());
    {
        let guard = members[follower].lock();
        let campaign = guard.as_ref().unwrap();
        wait_for(
            "a member to win",
            RETRY * 4 + Duration::from_secs(1),
            || {
                campaign
                    .elector()
                    .leader()
                    .unwrap()
                    .filter(|l| l.term > second_term)
            },
        );
    }
    println!("hand-over after request_resign: {:?}", t0.elapsed());
    stop.store(true, Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    assert!(samples > 10);
    drop(resigned);
    for member in &members {
        if let Some(campaign) = member.lock().take() {
            campaign.stop().unwrap();
        }
    }
}

/// Events arrive in decision order, a loss before any later gain, to the channel and the hooks
/// alike; a partitioned leader is told at its local deadline although its poll hangs.
#[test]
fn a_partitioned_leader_is_told_at_its_deadline_and_events_keep_their_order() {
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl LeaderHooks for Log {
        fn elected(&self, term: i64) {
            self.0.lock().push(format!("elected {term}"));
        }
        fn lost(&self, term: i64, reason: LeaderLoss) {
            self.0.lock().push(format!("lost {term} {reason}"));
        }
    }
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config())
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap();
    let log = Arc::new(Log::default());
    let a = elector_on(&via, &table, "partitioned")
        .campaign_with_hooks(log.clone())
        .unwrap();
    assert!(a.is_leading(), "the first poll runs in campaign()");
    let term = a.term().unwrap();
    let b = elector_on(&db(), &table, "other").campaign().unwrap();
    // Partition A: its polls hang; it must stop leading at its local deadline.
    proxy.blackhole();
    let t0 = Instant::now();
    let lost = wait_for("A to be told", TTL * 3, || {
        a.events().try_iter().find_map(|e| match e {
            LeaderEvent::Lost { reason, .. } => Some(reason),
            _ => None,
        })
    });
    let told = t0.elapsed();
    assert_eq!(lost, LeaderLoss::Expired);
    assert!(
        told <= TTL + Duration::from_millis(200),
        "told after {told:?}"
    );
    assert!(!a.is_leading());
    // B wins once A's row expires by the database clock; never while A still leads.
    let new_term = wait_for("B to win", TTL * 3, || b.term());
    assert!(new_term > term);
    proxy.heal();
    // Healed, A follows: it observes B and never leads on the old term again.
    wait_for("A to observe B", TTL * 3, || {
        a.events().try_iter().find_map(|e| match e {
            LeaderEvent::Observed(Some(l)) if l.term == new_term => Some(()),
            _ => None,
        })
    });
    assert!(!a.is_leading());
    assert_eq!(
        log.0.lock().clone(),
        vec![format!("elected {term}"), format!("lost {term} expired")]
    );
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_retry_period_not_below_the_ttl_is_refused_and_startup_errors_come_back_at_once() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let slow = Elector::new(&db())
        .with_table(&table)
        .unwrap()
        .with_ttl(Duration::from_secs(1))
        .unwrap()
        .with_retry_period(Duration::from_secs(1))
        .unwrap();
    assert!(slow.campaign().unwrap_err().is_invalid_input());
    assert!(Elector::new(&db())
        .with_retry_period(Duration::ZERO)
        .unwrap_err()
        .is_invalid_input());
    // A missing table: waiting cannot fix it, so campaign() says so instead of looping.
    let missing = Elector::new(&db())
        .with_table(&tables.name("missing"))
        .unwrap()
        .campaign_with_hooks(Arc::new(NoLeaderHooks))
        .unwrap_err();
    assert_eq!(
        missing.code(),
        Some(&pgtenure::postgres::error::SqlState::UNDEFINED_TABLE)
    );
}

/// A hook that panics ends the campaign's thread instead of hanging it: `stop` says so.
#[test]
fn a_panicking_hook_ends_the_campaign_and_stop_says_so() {
    #[derive(Default)]
    struct ThirdCallPanics(std::sync::atomic::AtomicUsize);
    impl ThirdCallPanics {
        fn call(&self) {
            if self.0.fetch_add(1, Ordering::SeqCst) == 2 {
                panic!("the hook's own bug");
            }
        }
    }
    impl LeaderHooks for ThirdCallPanics {
        fn elected(&self, _: i64) {
            self.call();
        }
        fn lost(&self, _: i64, _: LeaderLoss) {
            self.call();
        }
        fn observed(&self, _: Option<&pgtenure::LeaderInfo>) {
            self.call();
        }
    }
    let mut tables = Tables::new();
    let table = table(&mut tables);
    // Elected and observed on the first poll; the loss at the requested resignation panics.
    let campaign = elector_on(&db(), &table, "a")
        .campaign_with_hooks(Arc::new(ThirdCallPanics::default()))
        .unwrap();
    assert!(campaign.is_leading());
    assert!(campaign.elector().request_resign().unwrap());
    let ended = (0..100).any(|_| {
        thread::sleep(Duration::from_millis(50));
        campaign.is_finished()
    });
    if !ended {
        // Dropping it would wait for the hung thread.
        std::mem::forget(campaign);
        panic!("the campaign hung after its hook panicked");
    }
    let err = campaign.stop().unwrap_err();
    assert!(err.to_string().contains("panicked"), "{err}");
}
