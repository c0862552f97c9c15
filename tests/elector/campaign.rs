//! Leadership as a loop (`Elector::campaign`): events in order, one leader at a time, failover
//! after a stop, a resignation request, a partition and a crash.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::proxy::{database_addr, Proxy};
use crate::common::{self, db, wait_for, Tables};
use parking_lot::Mutex;
use pgtenure::{
    elector::{Elector, LeaderEvent, LeaderHooks, LeaderLoss, Leadership, NoLeaderHooks},
    Db, DbBuilder,
};

use super::table;

const TTL: Duration = Duration::from_millis(900);

const RETRY: Duration = Duration::from_millis(150);

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
            // Real time is the subject: a sample every 2 ms for as long as the test runs.
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
        .with_hooks(log.clone())
        .campaign()
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
    // The same settings in either order make the same elector: the rule between them is checked
    // where the campaign starts, not by whichever setter comes last.
    let missing = tables.name("missing");
    let ttl_first = Elector::new(&db())
        .with_table(&missing)
        .unwrap()
        .with_holder("h")
        .unwrap()
        .with_ttl(Duration::from_secs(1))
        .unwrap()
        .with_retry_period(Duration::from_secs(2))
        .unwrap();
    let retry_first = Elector::new(&db())
        .with_table(&missing)
        .unwrap()
        .with_holder("h")
        .unwrap()
        .with_retry_period(Duration::from_secs(2))
        .unwrap()
        .with_ttl(Duration::from_secs(1))
        .unwrap();
    assert_eq!(format!("{ttl_first:?}"), format!("{retry_first:?}"));
    assert_eq!(
        (ttl_first.ttl(), ttl_first.retry_period()),
        (Duration::from_secs(1), Duration::from_secs(2))
    );
    // Refused where it is used, naming both settings, before anything is sent (the table does not
    // exist: a poll would have failed with 42P01).
    for elector in [&ttl_first, &retry_first] {
        let err = elector.campaign().unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("with_retry_period") && message.contains("with_ttl"),
            "{message}"
        );
    }
    // The same pair, the other way round, is a valid campaign whichever setter came last.
    let fine = |retry_first: bool| {
        let e = Elector::new(&db()).with_table(&table).unwrap();
        if retry_first {
            e.with_retry_period(Duration::from_millis(300))
                .unwrap()
                .with_ttl(Duration::from_secs(1))
                .unwrap()
        } else {
            e.with_ttl(Duration::from_secs(1))
                .unwrap()
                .with_retry_period(Duration::from_millis(300))
                .unwrap()
        }
    };
    assert_eq!(fine(true).retry_period(), fine(false).retry_period());
    // A single value out of range is still refused by its setter, at once.
    assert!(Elector::new(&db())
        .with_retry_period(Duration::ZERO)
        .unwrap_err()
        .is_invalid_input());
    assert!(Elector::new(&db())
        .with_ttl(Duration::ZERO)
        .unwrap_err()
        .is_invalid_input());
    // A missing table: waiting cannot fix it, so campaign() says so instead of looping.
    let missing = Elector::new(&db())
        .with_table(&tables.name("missing"))
        .unwrap()
        .with_hooks(Arc::new(NoLeaderHooks))
        .campaign()
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
        fn observed(&self, _: Option<&pgtenure::elector::LeaderInfo>) {
            self.call();
        }
    }
    let mut tables = Tables::new();
    let table = table(&mut tables);
    // Elected and observed on the first poll; the loss at the requested resignation panics.
    let campaign = elector_on(&db(), &table, "a")
        .with_hooks(Arc::new(ThirdCallPanics::default()))
        .campaign()
        .unwrap();
    assert!(campaign.is_leading());
    assert!(campaign.elector().request_resign().unwrap());
    let ended = (0..100).any(|_| {
        // The poll interval of a bounded wait (5 s) on the campaign's thread ending.
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

/// Every `Elected` and `Lost` a campaign delivered, with the instant of delivery (hooks run as each
/// event is delivered, before it goes to the channel).
#[derive(Default)]
struct Timeline(Mutex<Vec<(Instant, LeaderEvent)>>);

impl LeaderHooks for Timeline {
    fn elected(&self, term: i64) {
        self.0
            .lock()
            .push((Instant::now(), LeaderEvent::Elected { term }));
    }
    fn lost(&self, term: i64, reason: LeaderLoss) {
        self.0
            .lock()
            .push((Instant::now(), LeaderEvent::Lost { term, reason }));
    }
}

impl Timeline {
    /// When the first event `f` picks was delivered.
    fn when(&self, f: impl Fn(&LeaderEvent) -> bool) -> Option<Instant> {
        self.0.lock().iter().find(|(_, e)| f(e)).map(|(at, _)| *at)
    }
}

/// Samples two beliefs about every 200 µs until stopped: `old` before and after reading `new`, so a
/// sample counts as an overlap only when `old` held across the instant `new` was read. Returns the
/// overlapping samples and the number of samples.
fn sample_overlaps(
    old: impl Fn() -> bool + Send + 'static,
    new: impl Fn() -> bool + Send + 'static,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<(usize, usize)> {
    thread::spawn(move || {
        let (mut overlaps, mut samples) = (0, 0);
        while !stop.load(Ordering::SeqCst) {
            let before = old();
            let now_new = new();
            if before && now_new && old() {
                overlaps += 1;
            }
            samples += 1;
            // Real time is the subject: a sample about every 200 µs until stopped.
            thread::sleep(Duration::from_micros(200));
        }
        (overlaps, samples)
    })
}

/// A leader whose answers come back slowly (through a proxy adding latency) and a contender that
/// polls every 20 ms; the TTL (8 s) leaves room for several slow round trips.
struct SlowLeader {
    proxy: Proxy,
    leader: Leadership,
    leader_log: Arc<Timeline>,
    contender: Leadership,
    contender_log: Arc<Timeline>,
}

const SLOW_TTL: Duration = Duration::from_secs(8);

impl SlowLeader {
    fn start(table: &str, latency: Duration) -> SlowLeader {
        let proxy = Proxy::start(0, database_addr()).unwrap();
        let via = DbBuilder::from_config(proxy.config()).build().unwrap();
        let leader_log = Arc::new(Timeline::default());
        let leader = elector_on(&via, table, "slow-leader")
            .with_ttl(SLOW_TTL)
            .unwrap()
            .with_retry_period(SLOW_TTL / 4)
            .unwrap()
            .with_hooks(leader_log.clone())
            .campaign()
            .unwrap();
        assert!(leader.is_leading(), "the first poll runs in campaign()");
        let contender_log = Arc::new(Timeline::default());
        let contender = elector_on(&db(), table, "fast-contender")
            .with_ttl(SLOW_TTL)
            .unwrap()
            .with_retry_period(Duration::from_millis(20))
            .unwrap()
            .with_hooks(contender_log.clone())
            .campaign()
            .unwrap();
        // From now on every chunk the leader's connection carries waits, both ways.
        proxy.set_latency(latency);
        SlowLeader {
            proxy,
            leader,
            leader_log,
            contender,
            contender_log,
        }
    }
}

/// How `lost` lies relative to `elected`, for the messages.
fn gap(lost: Instant, elected: Instant) -> String {
    if lost < elected {
        format!("{:?} before", elected - lost)
    } else {
        format!("{:?} after", lost - elected)
    }
}

/// When the first event `f` picks was delivered (waiting for it; on a timeout, the panic lists
/// what was delivered).
fn delivered(log: &Timeline, what: &str, f: impl Fn(&LeaderEvent) -> bool) -> Instant {
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for(what, SLOW_TTL * 3, || log.when(&f))
    }));
    waited.unwrap_or_else(|_| {
        let events: Vec<LeaderEvent> = log.0.lock().iter().map(|(_, e)| e.clone()).collect();
        panic!("no {what} delivered; delivered: {events:?}")
    })
}

/// When the contender's first `Elected` was delivered (waiting for it).
fn first_elected(log: &Timeline) -> Instant {
    delivered(log, "the contender's Elected", |e| {
        matches!(e, LeaderEvent::Elected { .. })
    })
}

/// Regression (issue 23): the leader's own renewal ended its tenure when it found a resignation
/// requested, so a contender polling meanwhile was elected while the leader, waiting for that
/// renewal's answer, still said it led. Now the renewal leaves the tenure as it is, the leader
/// stops leading and delivers `Lost`, and only then resigns.
#[test]
fn a_requested_resignation_frees_the_leadership_only_after_the_leader_stopped_leading() {
    for latency in [Duration::from_millis(300), Duration::from_millis(1000)] {
        let mut tables = Tables::new();
        let table = table(&mut tables);
        let slow = SlowLeader::start(&table, latency);
        let term = slow.leader.term().unwrap();
        let leader = Arc::new(slow.leader);
        let contender = Arc::new(slow.contender);
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (old, new) = (leader.clone(), contender.clone());
            sample_overlaps(
                move || old.is_leading(),
                move || new.is_leading(),
                stop.clone(),
            )
        };
        assert!(contender.elector().request_resign().unwrap());
        let elected = first_elected(&slow.contender_log);
        // The leader learns of the request from a renewal's answer. On a loaded machine with
        // 1 s each way, that answer can come back after the local deadline, and the belief then
        // ends by the clock (Expired) instead: the order and overlap checks below hold either
        // way. At 300 ms the request must be what ended it.
        let lost = delivered(
            &slow.leader_log,
            "the leader's Lost",
            |e| matches!(e, LeaderEvent::Lost { term: t, reason: LeaderLoss::ResignRequested | LeaderLoss::Expired } if *t == term),
        );
        let reason = slow.leader_log.when(|e: &LeaderEvent| {
            *e == LeaderEvent::Lost {
                term,
                reason: LeaderLoss::ResignRequested,
            }
        });
        if latency < Duration::from_secs(1) {
            assert!(
                reason.is_some(),
                "latency {latency:?}: the leader's loss was not ResignRequested"
            );
        } else if reason.is_none() {
            println!(
                "latency {latency:?}: the request reached the leader after its deadline (Expired)"
            );
        }
        stop.store(true, Ordering::SeqCst);
        let (overlaps, samples) = sampler.join().unwrap();
        println!(
            "latency {latency:?}: Lost(ResignRequested) delivered {} the contender's Elected; \
             {overlaps} of {samples} samples had both leading",
            gap(lost, elected)
        );
        assert!(
            lost < elected,
            "latency {latency:?}: the leader's Lost(ResignRequested) was delivered {} the \
             contender's Elected",
            gap(lost, elected)
        );
        assert_eq!(
            overlaps, 0,
            "latency {latency:?}: both said is_leading() at once"
        );
        assert!(!leader.is_leading());
        assert!(contender.term().unwrap() > term);
        // Quickly now: the leader may still be waiting for its resignation's answer.
        slow.proxy.set_latency(Duration::ZERO);
        Arc::into_inner(leader).unwrap().stop().unwrap();
        Arc::into_inner(contender).unwrap().stop().unwrap();
    }
}

/// Regression (issue 23): `stop()` resigned first and delivered `Lost(Stopped)` only when the
/// resignation's answer came back, after the successor's `Elected`. Now it stops leading and
/// delivers the loss before it sends the resignation.
#[test]
fn stop_delivers_its_loss_before_the_resignation_frees_the_leadership() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let slow = SlowLeader::start(&table, Duration::from_millis(300));
    let term = slow.leader.term().unwrap();
    let believes = slow.leader.elector().clone();
    let contender = Arc::new(slow.contender);
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let new = contender.clone();
        sample_overlaps(
            move || believes.term().is_some(),
            move || new.is_leading(),
            stop.clone(),
        )
    };
    let stopping = thread::spawn(move || slow.leader.stop());
    let elected = first_elected(&slow.contender_log);
    stopping.join().unwrap().unwrap();
    let lost = delivered(&slow.leader_log, "the leader's Lost", |e| {
        *e == LeaderEvent::Lost {
            term,
            reason: LeaderLoss::Stopped,
        }
    });
    stop.store(true, Ordering::SeqCst);
    let (overlaps, samples) = sampler.join().unwrap();
    println!(
        "Lost(Stopped) delivered {} the contender's Elected; {overlaps} of {samples} samples had \
         both leading",
        gap(lost, elected)
    );
    assert!(
        lost < elected,
        "the leader's Lost(Stopped) was delivered {} the contender's Elected",
        gap(lost, elected)
    );
    assert_eq!(overlaps, 0, "both led at once");
    assert!(contender.term().unwrap() > term);
    drop(slow.proxy);
    Arc::into_inner(contender).unwrap().stop().unwrap();
}

/// Regression (issue 23): a `stop()` whose resignation fails (here a statement timeout: another
/// transaction holds the row) returns the error, and the elector keeps the term, so `resign()` on it
/// afterwards frees the leadership at once instead of leaving the fleet leaderless for the TTL.
#[test]
fn a_stop_whose_resignation_failed_can_be_resigned_again() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let timing_out = Db::builder(&common::with_param(
        &common::direct_url(),
        "options",
        "-c%20statement_timeout%3D300",
    ))
    .unwrap()
    .build()
    .unwrap();
    let ttl = Duration::from_secs(30);
    let elector = elector_on(&timing_out, &table, "leader")
        .with_ttl(ttl)
        .unwrap()
        .with_retry_period(Duration::from_secs(10))
        .unwrap();
    let campaign = elector.campaign().unwrap();
    let term = campaign.term().unwrap();
    let events = campaign.events().clone();
    let other = elector_on(&db(), &table, "other").with_ttl(ttl).unwrap();
    let mut blocker = common::client();
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {table} WHERE name = 'fleet' FOR UPDATE"
        ))
        .unwrap();
    let err = campaign.stop().unwrap_err();
    assert_eq!(
        err.code(),
        Some(&pgtenure::postgres::error::SqlState::QUERY_CANCELED),
        "{err}"
    );
    assert_eq!(
        events.try_iter().last(),
        Some(LeaderEvent::Lost {
            term,
            reason: LeaderLoss::Stopped
        })
    );
    blocker.batch_execute("ROLLBACK").unwrap();
    assert!(!other.is_leader().unwrap(), "the tenure is still live");
    elector.resign().unwrap();
    assert!(
        other.is_leader().unwrap(),
        "the resignation sent again freed it at once, not after the 30 s TTL"
    );
}

/// A loss at the local deadline is final: a renewal answered too late must not bring the same term
/// back (work begun under it may still be winding down, and its term-fenced writes must stay
/// refused); a later win is a new term. The checker found "elected with term 99 after term 99".
#[test]
fn a_term_lost_at_its_deadline_never_comes_back() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let via = DbBuilder::from_config(proxy.config())
        .connection_timeout(Duration::from_secs(5))
        .unwrap()
        .build()
        .unwrap();
    let ttl = Duration::from_secs(2);
    let a = elector_on(&via, &table, "slow")
        .with_ttl(ttl)
        .unwrap()
        .with_retry_period(Duration::from_millis(100))
        .unwrap();
    let leading = a.campaign().unwrap();
    let term = leading.term().expect("the first poll runs in campaign()");
    // Answers slower than the TTL: a renewal commits (the row stays this elector's, live for a
    // TTL after it arrives) but its answer comes past the local deadline.
    proxy.set_latency(ttl * 6 / 10);
    let lost = wait_for("the loss", ttl * 4, || {
        leading.events().try_iter().find_map(|e| match e {
            LeaderEvent::Lost { term, reason } => Some((term, reason)),
            _ => None,
        })
    });
    assert_eq!(lost, (term, LeaderLoss::Expired));
    proxy.set_latency(Duration::ZERO);
    let again = wait_for("leading again", ttl * 5, || {
        leading.events().try_iter().find_map(|e| match e {
            LeaderEvent::Elected { term } => Some(term),
            _ => None,
        })
    });
    assert!(again > term, "the lost term {term} came back as {again}");
    let mut conn = db().connection().unwrap();
    let mut tx = conn.transaction().unwrap();
    assert!(
        !a.fence(&mut tx, term).unwrap(),
        "the lost term's writes are refused"
    );
    drop(tx);
    leading.stop().unwrap();
}

/// Found by an adversarial review: `Leadership::stop()` is "bounded by one poll and one resignation:
/// each the pool's connection timeout plus a statement, whose duration the TCP timeouts bound".
/// A poll whose server never answers (the proxy's blackhole; a hung server or pooler, whose kernel
/// still acknowledges, looks the same) is bounded by nothing: stop() waits for it forever, here
/// with a 1 s TCP user timeout and a 500 ms pool timeout.
#[test]
fn stop_while_the_database_does_not_answer_returns_within_its_bound() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let mut config = proxy.config();
    config.tcp_user_timeout(Duration::from_secs(1));
    let via = DbBuilder::from_config(config)
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap();
    // A TTL of its own: the first poll must answer within it on a loaded machine.
    let a = elector_on(&via, &table, "hung")
        .with_ttl(Duration::from_secs(3))
        .unwrap()
        .campaign()
        .unwrap();
    assert!(a.is_leading());
    proxy.blackhole();
    wait_for("the loss at the deadline", Duration::from_secs(9), || {
        a.events().try_iter().find_map(|e| match e {
            LeaderEvent::Lost { reason, .. } => Some(reason),
            _ => None,
        })
    });
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(a.stop());
    });
    let stopped = rx.recv_timeout(Duration::from_secs(8));
    let took = started.elapsed();
    proxy.heal();
    assert!(
        stopped.is_ok(),
        "stop() had not returned after {took:?} (bound: 2 x (500 ms pool timeout + a statement \
         bounded by the 1 s TCP user timeout))"
    );
}

/// Found by an adversarial review: `Elector::resign()` on a campaigning elector (the handle's own
/// `elector()`, or a clone kept beside it) frees the row before the campaign delivers its `Lost`.
/// The design: "the database frees a leadership only after its holder has stopped believing in
/// it". The campaign's consumer still holds `Elected` with no `Lost` while another member is
/// elected; the `Lost` comes at the next poll (a retry period later) and says `Taken`.
#[test]
fn resigning_a_campaigning_elector_delivers_its_lost_before_the_row_is_freed() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let retry = Duration::from_secs(2);
    let leader = elector_on(&db(), &table, "leader")
        .with_ttl(Duration::from_secs(10))
        .unwrap()
        .with_retry_period(retry)
        .unwrap();
    let campaign = leader.campaign().unwrap();
    let term = campaign.term().expect("elected by the first poll");
    assert!(drain(&campaign).contains(&LeaderEvent::Elected { term }));
    campaign.elector().resign().unwrap();
    // The row is free now: another member wins at once.
    let other = elector_on(&db(), &table, "other");
    assert!(other.is_leader().unwrap(), "the resignation freed the row");
    let told = drain(&campaign);
    let lost_at_once = told
        .iter()
        .any(|e| matches!(e, LeaderEvent::Lost { term: t, .. } if *t == term));
    let later = campaign
        .events()
        .recv_timeout(retry * 2)
        .map(|e| format!("{e:?}"))
        .unwrap_or_default();
    campaign.stop().unwrap();
    assert!(
        lost_at_once,
        "another member was elected while the campaign had told no Lost of term {term} (told so \
         far: {told:?}; the next event, a retry period later: {later})"
    );
}

/// Found by an adversarial review: invariant 7, "channels are crossbeam, bounded where a producer
/// could outrun a consumer". A campaign's events channel is unbounded, and an application that
/// follows the leadership through `is_leading()` or hooks never reads it: every `Elected`, `Lost`
/// and `Observed` of a long-running process stays queued (here 10 hand-overs and back, over 40
/// events kept, growing for as long as the process runs).
#[test]
fn a_campaign_nobody_reads_the_events_of_does_not_queue_them_without_bound() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let quiet = elector_on(&db(), &table, "quiet")
        .with_ttl(TTL)
        .unwrap()
        .with_retry_period(Duration::from_millis(20))
        .unwrap()
        .campaign()
        .unwrap();
    let other = elector_on(&db(), &table, "other").with_ttl(TTL).unwrap();
    // Leadership moves back and forth; `quiet` never reads its events.
    for _ in 0..10 {
        // Asked again while `other` does not lead: on a loaded machine `quiet`'s tenure may lapse
        // and be won back between a request and its renewal, and the request is then gone.
        wait_for("other to lead", Duration::from_secs(10), || {
            if other.is_leader().unwrap() {
                return Some(());
            }
            let _ = quiet.elector().request_resign();
            None
        });
        other.resign().unwrap();
        wait_for("quiet to lead again", Duration::from_secs(10), || {
            quiet.is_leading().then_some(())
        });
    }
    let queued = quiet.events().len();
    let capacity = quiet.events().capacity();
    quiet.stop().unwrap();
    assert!(
        capacity.is_some(),
        "the events channel is unbounded: {queued} events queued unread after 10 hand-overs"
    );
}

/// `stop()` past its bound (a poll stuck on a database that does not answer) leaves the loop's
/// thread to end on its own: that thread tells nothing after `Lost(Stopped)`, and once its
/// statement returns it resigns what that statement renewed, so another member wins well before
/// the tenure's TTL instead of after it.
#[test]
fn a_stop_past_its_bound_tells_nothing_more_and_resigns_once_the_database_answers() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let ttl = Duration::from_secs(10);
    let proxy = Proxy::start(0, database_addr()).unwrap();
    let mut config = proxy.config();
    config.tcp_user_timeout(Duration::from_secs(1));
    let via = DbBuilder::from_config(config)
        .connection_timeout(Duration::from_millis(500))
        .unwrap()
        .build()
        .unwrap();
    let a = elector_on(&via, &table, "hung")
        .with_ttl(ttl)
        .unwrap()
        .campaign()
        .unwrap();
    let term = a.term().expect("elected by the first poll");
    let events = a.events().clone();
    proxy.blackhole();
    // A poll holds a connection (and hangs) once the next retry period comes.
    wait_for("a poll stuck on the database", ttl / 4, || {
        let pool = via.pool_state();
        (pool.connections > pool.idle_connections).then_some(())
    });
    let (tx, rx) = pgtenure::crossbeam_channel::bounded(1);
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(a.stop());
    });
    // The bound: 2 x 500 ms pool timeout + 2 s.
    let stopped = rx.recv_timeout(ttl / 2);
    let took = started.elapsed();
    let told: Vec<LeaderEvent> = events.try_iter().collect();
    proxy.heal();
    let stopped = stopped.unwrap_or_else(|_| panic!("stop() had not returned after {took:?}"));
    let error = stopped.expect_err("stop() says the thread was left behind");
    assert_eq!(error.kind(), pgtenure::ErrorKind::Connection, "{error}");
    assert_eq!(
        told.last(),
        Some(&LeaderEvent::Lost {
            term,
            reason: LeaderLoss::Stopped
        }),
        "told: {told:?}"
    );
    // The stuck poll goes through once healed (renewing the tenure for a TTL), then the thread
    // resigns: another member wins long before that TTL ends.
    let other = elector_on(&db(), &table, "other").with_ttl(ttl).unwrap();
    wait_for("the left thread to resign", ttl / 2, || {
        other.is_leader().unwrap().then_some(())
    });
    // The thread ends (the channel's sender goes with it) with nothing more told.
    match events.recv_timeout(ttl / 2) {
        Err(pgtenure::crossbeam_channel::RecvTimeoutError::Disconnected) => {}
        other => panic!("after Lost(Stopped), the left thread told {other:?}"),
    }
}

/// The events channel keeps the newest `EVENTS_CAPACITY` unread: a reader that fell behind finds the
/// oldest dropped (and counted) and the current truth last, never a stale `Elected` as its latest.
#[test]
fn a_reader_that_fell_behind_finds_the_latest_events_last() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let late = elector_on(&db(), &table, "late")
        .with_retry_period(Duration::from_millis(20))
        .unwrap()
        .campaign()
        .unwrap();
    let other = elector_on(&db(), &table, "other");
    let mut handovers = 0;
    while late.dropped_events() == 0 {
        assert!(
            handovers < 40,
            "nothing dropped after {handovers} hand-overs"
        );
        late.elector().request_resign().unwrap();
        wait_for("other to lead", Duration::from_secs(10), || {
            other.is_leader().unwrap().then_some(())
        });
        other.resign().unwrap();
        wait_for("late to lead again", Duration::from_secs(10), || {
            late.is_leading().then_some(())
        });
        handovers += 1;
    }
    let term = late.term();
    let told = drain(&late);
    let dropped = late.dropped_events();
    late.stop().unwrap();
    assert!(
        told.len() <= pgtenure::elector::EVENTS_CAPACITY,
        "{} events queued",
        told.len()
    );
    let last_elected = told.iter().rev().find_map(|e| match e {
        LeaderEvent::Elected { term } => Some(*term),
        _ => None,
    });
    assert_eq!(
        last_elected, term,
        "after {handovers} hand-overs ({dropped} dropped), the latest Elected read is the term \
         leading now; read: {told:?}"
    );
}

/// Invariant 12: "dropping many handles during an outage must not multiply" a bound. Three
/// campaigns, each leading its own fleet, whose polls hang on a database that does not answer:
/// dropped together (a `Vec` of them), they must take about one bound, not one each.
#[test]
fn dropping_many_campaigns_during_an_outage_does_not_multiply_the_bound() {
    let mut tables = Tables::new();
    let table = table(&mut tables);
    // One proxy per campaign: the test sees each one's poll hang.
    let proxies: Vec<_> = (0..3)
        .map(|_| Proxy::start(0, database_addr()).unwrap())
        .collect();
    let campaigns: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            let mut config = proxy.config();
            config.tcp_user_timeout(Duration::from_secs(1));
            let via = DbBuilder::from_config(config)
                .connection_timeout(Duration::from_millis(500))
                .unwrap()
                .build()
                .unwrap();
            elector_on(&via, &table, "hung")
                .with_name(&format!("fleet-{i}"))
                .unwrap()
                .with_ttl(Duration::from_secs(3))
                .unwrap()
                .with_retry_period(Duration::from_millis(200))
                .unwrap()
                .campaign()
                .unwrap()
        })
        .collect();
    for campaign in &campaigns {
        assert!(campaign.is_leading());
    }
    for proxy in &proxies {
        proxy.blackhole();
    }
    // Every campaign's next poll (every 200 ms) is on the wire and hangs.
    wait_for(
        "every campaign's next poll on the wire, hanging",
        Duration::from_secs(5),
        || proxies.iter().all(|p| p.held() > 0).then_some(()),
    );
    let bound = Duration::from_millis(500) * 2 + Duration::from_secs(2);
    let dropping = Instant::now();
    drop(campaigns);
    let took = dropping.elapsed();
    for proxy in &proxies {
        proxy.heal();
    }
    println!("dropping three campaigns during the outage took {took:?}");
    assert!(
        took < bound + Duration::from_millis(1500),
        "dropping three campaigns during the outage took {took:?} (bound {bound:?} each)"
    );
}

/// A campaign stopped from inside one of its own hooks: `stop` returns at once (it cannot wait for
/// the thread the hook runs on), the `Stopped` loss follows the event whose hook stopped it, and
/// the loop resigns: another member is elected without waiting for the TTL.
#[test]
fn a_campaign_stopped_from_its_own_hook_returns_at_once_and_resigns() {
    /// Stops its campaign from the second `elected` (the first runs inside `campaign()`, before
    /// the handle exists).
    #[derive(Default)]
    struct StopsItself {
        handle: Mutex<Option<Leadership>>,
        stopped: Mutex<Option<(Duration, Result<(), String>)>>,
    }
    impl LeaderHooks for StopsItself {
        fn elected(&self, _term: i64) {
            if let Some(handle) = self.handle.lock().take() {
                let began = Instant::now();
                let result = handle.stop().map_err(|e| e.to_string());
                *self.stopped.lock() = Some((began.elapsed(), result));
            }
        }
    }
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let hooks = Arc::new(StopsItself::default());
    let db = db();
    let a = elector_on(&db, &table, "a")
        .with_hooks(hooks.clone())
        .campaign()
        .unwrap();
    assert!(a.is_leading());
    let events = a.events().clone();
    let elector = a.elector().clone();
    *hooks.handle.lock() = Some(a);
    // Steps down, stands aside for a TTL, then wins again: that `elected` stops the campaign.
    assert!(elector.request_resign().unwrap());
    let (took, result) = wait_for("the hook's stop", Duration::from_secs(15), || {
        hooks.stopped.lock().clone()
    });
    assert_eq!(result, Ok(()));
    assert!(took < Duration::from_secs(1), "stop waited {took:?}");
    let stopped = |e: &LeaderEvent| {
        matches!(
            e,
            LeaderEvent::Lost {
                reason: LeaderLoss::Stopped,
                ..
            }
        )
    };
    let mut told = Vec::new();
    wait_for("the Stopped loss", Duration::from_secs(5), || {
        told.extend(events.try_iter());
        told.iter().any(stopped).then_some(())
    });
    let terms: Vec<(i64, Option<LeaderLoss>)> = told
        .iter()
        .filter_map(|e| match e {
            LeaderEvent::Elected { term } => Some((*term, None)),
            LeaderEvent::Lost { term, reason } => Some((*term, Some(*reason))),
            _ => None,
        })
        .collect();
    let second = terms[2].0;
    assert_eq!(
        terms,
        [
            (terms[0].0, None),
            (terms[0].0, Some(LeaderLoss::ResignRequested)),
            (second, None),
            (second, Some(LeaderLoss::Stopped)),
        ],
        "{told:?}"
    );
    // The loop resigned on its way out: another member wins at once, not after the TTL.
    let b = elector_on(&db, &table, "b");
    wait_for("b elected after the resignation", TTL / 2, || {
        b.is_leader().unwrap().then_some(())
    });
    b.resign().unwrap();
}

/// A campaign stopped from one of its hooks that runs on another thread than the loop's (the
/// `Lost` of a resignation is delivered on the thread that called `resign`): `stop` returns at once
/// there too. It cannot wait for the loop, which waits for this very delivery to end before it
/// tells anything more; the loop ends (resigning) once the hook returns.
#[test]
fn a_campaign_stopped_from_a_hook_on_the_resigning_thread_returns_at_once() {
    /// Stops its campaign from the `Lost` of a resignation.
    #[derive(Default)]
    struct StopsOnResign {
        handle: Mutex<Option<Leadership>>,
        stopped: Mutex<Option<(Duration, Result<(), String>)>>,
    }
    impl LeaderHooks for StopsOnResign {
        fn lost(&self, _term: i64, reason: LeaderLoss) {
            if reason != LeaderLoss::Resigned {
                return;
            }
            if let Some(handle) = self.handle.lock().take() {
                let began = Instant::now();
                let result = handle.stop().map_err(|e| e.to_string());
                *self.stopped.lock() = Some((began.elapsed(), result));
            }
        }
    }
    let mut tables = Tables::new();
    let table = table(&mut tables);
    let hooks = Arc::new(StopsOnResign::default());
    let db = db();
    let a = elector_on(&db, &table, "a")
        .with_hooks(hooks.clone())
        .campaign()
        .unwrap();
    assert!(a.is_leading());
    let elector = a.elector().clone();
    *hooks.handle.lock() = Some(a);
    // The `Lost` is delivered here, on this thread, and its hook stops the campaign.
    let resigned = thread::spawn(move || elector.resign());
    let (took, result) = wait_for("the hook's stop", Duration::from_secs(30), || {
        hooks.stopped.lock().clone()
    });
    assert_eq!(result, Ok(()));
    assert!(took < Duration::from_secs(1), "stop waited {took:?}");
    resigned.join().unwrap().unwrap();
    // The loop ended and the term was resigned: another member wins at once, not after the TTL.
    let b = elector_on(&db, &table, "b");
    wait_for("b elected after the resignation", TTL / 2, || {
        b.is_leader().unwrap().then_some(())
    });
    b.resign().unwrap();
}
