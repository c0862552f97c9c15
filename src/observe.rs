//! What pgtenure reports through the [`metrics`](https://docs.rs/metrics) facade with the feature
//! `metrics`: one function per event, called where the event is decided. Without the feature each
//! is empty and nothing of the facade is compiled in. `docs/metrics.md` lists every metric; a test
//! (`tests/metrics.rs`) keeps the two in step.
//!
//! Names follow Prometheus's conventions (`_total` counters, units in the name, base units), and
//! labels take only bounded values: outcomes and reasons, fleet names and job ids (which an
//! application configures), SQLSTATE classes; never a lease key or a unit.

use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit,
};

/// The counters: name and help text (their unit is a count).
#[cfg(feature = "metrics")]
const COUNTERS: &[(&str, &str)] = &[
    (
        "pgtenure_lease_acquires_total",
        "Lease grants asked, by outcome",
    ),
    (
        "pgtenure_semaphore_acquires_total",
        "Semaphore permits asked, by outcome",
    ),
    (
        "pgtenure_lease_renewals_total",
        "Lease renewals, by outcome",
    ),
    (
        "pgtenure_lease_losses_total",
        "Managed leases lost, by reason",
    ),
    ("pgtenure_tick_claims_total", "Tick claims, by outcome"),
    ("pgtenure_fire_claims_total", "Fire claims, by outcome"),
    (
        "pgtenure_leader_polls_total",
        "Election polls, by fleet and outcome",
    ),
    (
        "pgtenure_leader_terms_won_total",
        "Terms this process won, by fleet",
    ),
    (
        "pgtenure_leader_losses_total",
        "Leaderships a campaign lost, by fleet and reason",
    ),
    (
        "pgtenure_membership_heartbeats_total",
        "Membership heartbeats, by outcome",
    ),
    (
        "pgtenure_membership_tick_failures_total",
        "Membership rebalance steps that failed",
    ),
    ("pgtenure_units_claimed_total", "Membership units claimed"),
    (
        "pgtenure_units_shed_total",
        "Membership units given back to balance the fleet",
    ),
    (
        "pgtenure_units_lost_total",
        "Membership units lost, by reason",
    ),
    (
        "pgtenure_job_runs_total",
        "Scheduled runs that ended, by job and outcome",
    ),
    (
        "pgtenure_job_misfires_total",
        "Misfires (ticks skipped as too late), by job",
    ),
    (
        "pgtenure_statement_errors_total",
        "Failed statements returned, by SQLSTATE class",
    ),
    (
        "pgtenure_pool_timeouts_total",
        "Waits for a pool connection that timed out",
    ),
    (
        "pgtenure_connection_modes_total",
        "Pool connections by statement mode",
    ),
];

/// The gauges: name, unit and help text.
#[cfg(feature = "metrics")]
const GAUGES: &[(&str, Unit, &str)] = &[
    (
        "pgtenure_leases_held",
        Unit::Count,
        "Managed leases this process holds",
    ),
    (
        "pgtenure_leader",
        Unit::Count,
        "1 while this process leads the fleet, else 0",
    ),
    (
        "pgtenure_units_owned",
        Unit::Count,
        "Membership units this process owns",
    ),
];

/// The histograms: name and help text (their unit is seconds).
#[cfg(feature = "metrics")]
const HISTOGRAMS: &[(&str, &str)] = &[
    (
        "pgtenure_lease_renewal_duration_seconds",
        "How long a managed lease's renewal took",
    ),
    (
        "pgtenure_lease_renewal_slack_seconds",
        "Time left before a managed lease's local deadline when its renewal answered",
    ),
    (
        "pgtenure_membership_tick_duration_seconds",
        "How long each rebalance step took",
    ),
    (
        "pgtenure_job_run_duration_seconds",
        "How long each scheduled run took, by job",
    ),
    (
        "pgtenure_job_lateness_seconds",
        "How long after its tick was due each run was won",
    ),
    (
        "pgtenure_pool_wait_seconds",
        "How long each wait for a pool connection took",
    ),
];

/// Describes every metric to the installed recorder (its help text and unit: the `# HELP` lines of
/// a Prometheus exporter). Called once by the first `Db` built; an application that installs its
/// recorder later calls [`describe_metrics`](crate::describe_metrics) after.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    for &(name, help) in COUNTERS {
        describe_counter!(name, Unit::Count, help);
    }
    for &(name, unit, help) in GAUGES {
        describe_gauge!(name, unit, help);
    }
    for &(name, help) in HISTOGRAMS {
        describe_histogram!(name, Unit::Seconds, help);
    }
}

/// [`describe`] the first time a `Db` is built.
pub(crate) fn describe_once() {
    #[cfg(feature = "metrics")]
    {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(describe);
    }
}

/// `counter!(name, label => value)` where `value` is usually one of the `known` literals: each of
/// those has a key of its own made at compile time, so a count costs no allocation and no hashing
/// of the key; any other value gets a key made for the call.
#[cfg(feature = "metrics")]
macro_rules! counter_of {
    ($name:literal, $label:literal => $value:expr; $($known:literal),+) => {
        match $value {
            $($known => counter!($name, $label => $known),)+
            other => counter!($name, $label => other),
        }
    };
}

/// A lease grant (`acquire`, `try_acquire`, `with_lease`): granted or refused.
pub(crate) fn lease_acquire(granted: bool) {
    #[cfg(feature = "metrics")]
    counter_of!("pgtenure_lease_acquires_total", "outcome" => if granted { "granted" } else { "refused" }; "granted", "refused")
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = granted;
}

/// A semaphore acquire answered: a permit granted, or refused (every permit held).
pub(crate) fn semaphore_acquire(granted: bool) {
    #[cfg(feature = "metrics")]
    counter_of!("pgtenure_semaphore_acquires_total", "outcome" => if granted { "granted" } else { "refused" }; "granted", "refused")
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = granted;
}

/// A renewal of a lease answered (`outcome`: `renewed`, `superseded`, `refused`) or failed
/// (`failed`); a managed lease's also says how long it `took` after it was sent and the slack left
/// before the lease's local deadline when the answer came (zero when it came after it).
pub(crate) fn lease_renewal(outcome: &'static str, timing: Option<(Duration, Option<Duration>)>) {
    #[cfg(feature = "metrics")]
    {
        counter_of!("pgtenure_lease_renewals_total", "outcome" => outcome; "renewed", "superseded", "refused", "failed")
            .increment(1);
        if let Some((took, slack)) = timing {
            histogram!("pgtenure_lease_renewal_duration_seconds").record(took.as_secs_f64());
            histogram!("pgtenure_lease_renewal_slack_seconds")
                .record(slack.map_or(0.0, |slack| slack.as_secs_f64()));
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (outcome, timing);
}

/// A managed lease was lost (`reason`: `expired`, `refused`, `superseded`).
pub(crate) fn lease_lost(reason: &'static str) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_lease_losses_total", "reason" => reason).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = reason;
}

/// Managed leases held by this process: one more (`true`) or one fewer.
pub(crate) fn lease_held(more: bool) {
    #[cfg(feature = "metrics")]
    {
        let held = gauge!("pgtenure_leases_held");
        if more {
            held.increment(1.0);
        } else {
            held.decrement(1.0);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = more;
}

/// A tick claim answered (`outcome`: `won`, `refused`, `not_yet_due`).
pub(crate) fn tick_claim(outcome: &'static str) {
    #[cfg(feature = "metrics")]
    counter_of!("pgtenure_tick_claims_total", "outcome" => outcome; "won", "refused", "not_yet_due")
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}

/// A fire claim answered: won or refused.
pub(crate) fn fire_claim(won: bool) {
    #[cfg(feature = "metrics")]
    counter_of!("pgtenure_fire_claims_total", "outcome" => if won { "won" } else { "refused" }; "won", "refused")
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = won;
}

/// An elector's poll of `fleet` answered (`leading` or not), or failed (`None`); a poll that won a
/// new term says so (`won`). A failed poll whose leadership is `kept` (a campaign's: its watcher
/// ends it at the local deadline) leaves the gauge as it was; otherwise it leads no more.
pub(crate) fn leader_poll(fleet: &str, leading: Option<bool>, kept: bool, won: bool) {
    #[cfg(feature = "metrics")]
    {
        let fleet = fleet.to_owned();
        let outcome = match leading {
            Some(true) => "leading",
            Some(false) => "following",
            None => "failed",
        };
        counter!("pgtenure_leader_polls_total", "fleet" => fleet.clone(), "outcome" => outcome)
            .increment(1);
        if leading.is_some() || !kept {
            gauge!("pgtenure_leader", "fleet" => fleet.clone()).set(if leading == Some(true) {
                1.0
            } else {
                0.0
            });
        }
        if won {
            counter!("pgtenure_leader_terms_won_total", "fleet" => fleet).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (fleet, leading, kept, won);
}

/// An elector of `fleet` stopped believing in the term it held (it resigns it): it leads no more.
pub(crate) fn leader_stood_down(fleet: &str) {
    #[cfg(feature = "metrics")]
    gauge!("pgtenure_leader", "fleet" => fleet.to_owned()).set(0.0);
    #[cfg(not(feature = "metrics"))]
    let _ = fleet;
}

/// A campaign on `fleet` lost its leadership (`reason`: `expired`, `taken`, `resign_requested`,
/// `stopped`, `resigned`).
pub(crate) fn leader_lost(fleet: &str, reason: &'static str) {
    #[cfg(feature = "metrics")]
    {
        let fleet = fleet.to_owned();
        counter!("pgtenure_leader_losses_total", "fleet" => fleet.clone(), "reason" => reason)
            .increment(1);
        gauge!("pgtenure_leader", "fleet" => fleet).set(0.0);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (fleet, reason);
}

/// A membership heartbeat succeeded or failed.
pub(crate) fn heartbeat(ok: bool) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_membership_heartbeats_total", "outcome" => if ok { "ok" } else { "failed" })
        .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = ok;
}

/// A membership tick (rebalance step) took `took`, claimed `claimed` and shed `shed` units, and
/// left this process owning `owned`; `None` when it failed.
pub(crate) fn membership_tick(took: Duration, moved: Option<(usize, usize, usize)>) {
    #[cfg(feature = "metrics")]
    {
        histogram!("pgtenure_membership_tick_duration_seconds").record(took.as_secs_f64());
        match moved {
            Some((claimed, shed, owned)) => {
                counter!("pgtenure_units_claimed_total").increment(claimed as u64);
                counter!("pgtenure_units_shed_total").increment(shed as u64);
                units_owned(owned);
            }
            None => counter!("pgtenure_membership_tick_failures_total").increment(1),
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (took, moved);
}

/// This process owns `owned` units now (after a rebalance step, or none once it forgot them all).
pub(crate) fn units_owned(owned: usize) {
    #[cfg(feature = "metrics")]
    gauge!("pgtenure_units_owned").set(owned as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = owned;
}

/// `count` units were lost (`reason`: `shed`, `expired`, `taken`, `removed`, `released`).
pub(crate) fn units_lost(reason: &'static str, count: usize) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_units_lost_total", "reason" => reason).increment(count as u64);
    #[cfg(not(feature = "metrics"))]
    let _ = (reason, count);
}

/// A scheduled run of `job` started `late` after its tick was due.
pub(crate) fn job_started(job: &str, late: Duration) {
    #[cfg(feature = "metrics")]
    histogram!("pgtenure_job_lateness_seconds", "job_id" => job.to_owned())
        .record(late.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (job, late);
}

/// A scheduled run of `job` ended (`outcome`: `ok`, `failed`, `panicked`) after `took`.
pub(crate) fn job_ended(job: &str, outcome: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        let job = job.to_owned();
        counter!("pgtenure_job_runs_total", "job_id" => job.clone(), "outcome" => outcome)
            .increment(1);
        histogram!("pgtenure_job_run_duration_seconds", "job_id" => job).record(took.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (job, outcome, took);
}

/// A tick of `job` was missed (reached later than its grace).
pub(crate) fn job_missed(job: &str) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_job_misfires_total", "job_id" => job.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = job;
}

/// A statement failed and the failure was returned: `class` is the SQLSTATE's class (its first two
/// characters), `connection` when the connection broke without one, `driver` otherwise.
pub(crate) fn statement_error(class: &str) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_statement_errors_total", "class" => class.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = class;
}

/// A pool checkout waited `waited`, and got a connection or timed out.
pub(crate) fn pool_wait(waited: Duration, got: bool) {
    #[cfg(feature = "metrics")]
    {
        histogram!("pgtenure_pool_wait_seconds").record(waited.as_secs_f64());
        if !got {
            counter!("pgtenure_pool_timeouts_total").increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (waited, got);
}

/// A pool connection's statement mode was decided (`mode`: `protocol`, `sql`, `unprepared`).
pub(crate) fn connection_mode(mode: &'static str) {
    #[cfg(feature = "metrics")]
    counter!("pgtenure_connection_modes_total", "mode" => mode).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = mode;
}
