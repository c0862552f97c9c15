//! A leaser's configuration and its metrics hooks: timing and claim sizing, validated in one place.

use std::time::Duration;

use super::local::stop_after;
use crate::error::{Error, Result};
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::{hostname, parse_uuid, random_uuid};

/// A [`Leaser`](super::Leaser)'s timing and claim sizing.
///
/// Build it from `Config::default()` and set the fields you need. [`Leaser::new`](super::Leaser::new)
/// checks it, once: a zero or blank value is refused like any other invalid one (the defaults are
/// what `Config::default()` holds).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// The process's name, stored in the process row's `hostname` column once, for operators:
    /// `pgtenure members` shows it (NAME, and `name` in its `--json`), and so does the exporter.
    /// Defaults to this machine's host name; [`Config::with_name`] gives the name the application
    /// knows the process by instead.
    pub hostname: String,
    /// Stored in the process row once, for operators. Defaults to `"unknown"`.
    pub version: String,
    /// The process id, UUID text; `None` draws a random one. Defaults to `None`.
    ///
    /// Never give one id to two live processes: nothing tells them apart (they heartbeat one row,
    /// both own its units, and both pass a unit's fence, which checks the process id and the
    /// claim's token). A process restarted under its id adopts its previous incarnation's units
    /// and their fences while that incarnation's row is live: after a crash (not a graceful
    /// [`Running::stop`](super::Running::stop), which deletes the row) start it under a new id, or
    /// only once the old row expired (one TTL).
    pub process_id: Option<String>,
    /// How long a process row stays live after a heartbeat. Defaults to 15 s.
    pub ttl: Duration,
    /// How often `run` heartbeats; must be below four fifths of `ttl` (a process stops acting on its
    /// units four fifths of the TTL after its last successful heartbeat). Defaults to 5 s.
    pub heartbeat_interval: Duration,
    /// How often `run` rebalances (ticks). Defaults to 5 s.
    pub rebalance_interval: Duration,
    /// How often `run` sweeps long-expired process rows. Defaults to 10 minutes.
    pub sweep_interval: Duration,
    /// How long a process row must have been expired before a sweep deletes it; must exceed `ttl`.
    /// Defaults to 1 hour.
    pub sweep_cutoff: Duration,
    /// The most units one claim statement takes, at least 1 and at most `max_claim_per_tick`.
    /// Defaults to 64.
    pub claim_batch: u32,
    /// The most units (by weight) one tick claims, at least 1. Defaults to 1,024.
    pub max_claim_per_tick: u32,
    /// How a new process joins, counted in its own heartbeats so that hand-driven rounds
    /// (`heartbeat` then `tick`) converge as `run` does.
    ///
    /// - **Probation.** A process counts in the fair share, claims, and is shed to only once it
    ///   has shown it stays: from its second heartbeat (its row is then *settled*), or at once when
    ///   it owns units (restarted under its process id). An instance crash-looping under a new id
    ///   at each start, dying within a heartbeat interval, never settles: the healthy processes
    ///   never shed to it, and the slot costs the fleet at most its own share (its last working
    ///   incarnation's units, claimed by the others once that row expires). A process joining a
    ///   fleet that works (a rolling deploy) claims its share one heartbeat interval after it
    ///   starts.
    /// - **Slower crash loops.** An incarnation that lives past its second heartbeat but less
    ///   than a `ttl` is shed to, and the rows of dead incarnations count for a `ttl` after their
    ///   last beat: such a loop can cost the fleet more than the slot's share (incarnations living
    ///   1.5 s with 1 s heartbeats and a 3 s TTL: about 230 units shed by the healthy processes in
    ///   12 s, up to 222 units without a working owner where the slot's share is 125). Set
    ///   `warm_up` to the `ttl` where that can happen: a process then settles only once it has
    ///   been live for a `ttl`, and no loop costs more than one share, at the price of a newcomer
    ///   taking its share a `ttl` after it starts.
    /// - **Cold start.** In a cold fleet, one where no live process owns a unit, a settled
    ///   process claims once every other live process it sees has settled too, so processes
    ///   started within one heartbeat interval of each other claim each unit once and shed none;
    ///   a live set that never settles (a crash loop) ends that wait two heartbeat intervals after
    ///   the process's first tick once it counts (with a duration `d` set below: one heartbeat
    ///   interval, `d` and one `ttl`).
    ///
    /// `Some(d)` with `d` above zero also makes a process settle only at a heartbeat at least `d`
    /// after its first (by the database clock), and waits, in a cold fleet, until the other live
    /// processes have been the same set for `d` (by the wall clock; a join or leave starts the
    /// wait again), like Kafka's initial rebalance delay. `Some(Duration::ZERO)` turns all of it
    /// off: a process counts from its first heartbeat and claims at its first tick (fleets that
    /// never crash-loop, tests that want claims in the first round). Defaults to `None`: settled
    /// at the second heartbeat, with no wall-clock wait.
    pub warm_up: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            hostname: hostname(),
            version: "unknown".to_owned(),
            process_id: None,
            ttl: Duration::from_secs(15),
            heartbeat_interval: Duration::from_secs(5),
            rebalance_interval: Duration::from_secs(5),
            sweep_interval: Duration::from_secs(600),
            sweep_cutoff: Duration::from_secs(3600),
            claim_batch: 64,
            max_claim_per_tick: 1024,
            warm_up: None,
        }
    }
}

impl Config {
    /// This configuration with `name` as the process's name, in place of the host name (the
    /// [`hostname`](Config::hostname) field, stored in the processes table's `hostname` column):
    /// the name `pgtenure members` and the exporter show. Give the name the application knows the
    /// process by, the one it passes to [`Elector::with_holder`](crate::elector::Elector::with_holder),
    /// [`Leases::with_owner`](crate::leases::Leases::with_owner) or
    /// [`Scheduler::with_owner`](crate::schedule::Scheduler::with_owner), so that one name
    /// identifies it everywhere:
    ///
    /// ```
    /// let config = pgtenure::membership::Config::default().with_name("worker-3");
    /// assert_eq!(config.hostname, "worker-3");
    /// ```
    ///
    /// Checked by [`Leaser::new`](super::Leaser::new) as any field: a blank name, one with a NUL
    /// byte or one over the key length limit is refused with
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Config {
        self.hostname = name.into();
        self
    }

    /// Checks every field (the one place a configuration is checked) and draws the process id if
    /// none was given.
    pub(super) fn validated(mut self) -> Result<Config> {
        check_key("hostname", &self.hostname)?;
        check_key("version", &self.version)?;
        micros("membership ttl", self.ttl, MIN_DURATION)?;
        micros("heartbeat interval", self.heartbeat_interval, MIN_DURATION)?;
        micros("rebalance interval", self.rebalance_interval, MIN_DURATION)?;
        micros("sweep interval", self.sweep_interval, MIN_DURATION)?;
        micros("sweep cutoff", self.sweep_cutoff, MIN_DURATION)?;
        if let Some(warm_up) = self.warm_up {
            micros("warm-up", warm_up, Duration::ZERO)?;
        }
        if self.heartbeat_interval >= stop_after(self.ttl) {
            return Err(Error::invalid_input(format!(
                "heartbeat interval {:?} is not below four fifths of the TTL {:?}; a process would \
                 stop working on its units between beats",
                self.heartbeat_interval, self.ttl
            )));
        }
        if self.sweep_cutoff <= self.ttl {
            return Err(Error::invalid_input(format!(
                "sweep cutoff {:?} is not above the TTL {:?}; live but late processes would be swept",
                self.sweep_cutoff, self.ttl
            )));
        }
        if self.claim_batch == 0 || self.max_claim_per_tick == 0 {
            return Err(Error::invalid_input(format!(
                "claim_batch {} and max_claim_per_tick {} must both be at least 1",
                self.claim_batch, self.max_claim_per_tick
            )));
        }
        if self.max_claim_per_tick > i32::MAX as u32 {
            return Err(Error::invalid_input("max_claim_per_tick is above 2^31 - 1"));
        }
        if self.claim_batch > self.max_claim_per_tick {
            return Err(Error::invalid_input(format!(
                "claim_batch {} is above max_claim_per_tick {}; a tick never claims more than \
                 max_claim_per_tick, so set claim_batch at most that",
                self.claim_batch, self.max_claim_per_tick
            )));
        }
        self.process_id = Some(match self.process_id.take() {
            Some(id) => parse_uuid(&id)?,
            None => random_uuid(),
        });
        Ok(self)
    }

    /// How long a cold fleet's live set must hold still (wall clock) before a first claim:
    /// [`Config::warm_up`], or nothing.
    pub(super) fn warm_up_wait(&self) -> Duration {
        self.warm_up.unwrap_or(Duration::ZERO)
    }

    /// Whether a process counts only once settled, and a cold fleet waits for its processes to
    /// settle (everything but `Some(Duration::ZERO)`).
    pub(super) fn probation(&self) -> bool {
        self.warm_up != Some(Duration::ZERO)
    }

    /// The longest cold-start wait, from the first look (this process's first tick once it counts,
    /// about one heartbeat interval after it started), however often the live set changes.
    ///
    /// Waiting only for the others to settle (no warm-up duration): two heartbeat intervals. A
    /// process started within one heartbeat interval of this one settles within one heartbeat
    /// interval of that first look; the second is slack for a late beat. A crash-looping slot's
    /// incarnations never settle, and waiting for their rows to expire (a TTL) kept every unit of
    /// a cold fleet unowned a TTL longer than a clean cold start.
    ///
    /// With a warm-up duration: a heartbeat interval (for the others to settle), the warm-up and a
    /// TTL (an incarnation that crashed before it settled stays in the live set for a TTL, and the
    /// set must hold still for the warm-up).
    pub(super) fn warm_up_most(&self) -> Duration {
        let wait = self.warm_up_wait();
        if wait.is_zero() {
            return self.heartbeat_interval.saturating_mul(2);
        }
        self.heartbeat_interval
            .saturating_add(wait)
            .saturating_add(self.ttl)
    }
}

/// Observers of a [`Leaser`](super::Leaser)'s rebalance steps, for metrics. Every method has a
/// default that does nothing, so implement only what you record (and new methods can be added
/// without breaking you); [`NoHooks`] observes nothing.
///
/// The methods are called on the thread that ticks, after the tick's [`Reconciler`](super::Reconciler)
/// calls and outside the leaser's locks (a hook may call back into the leaser); keep them short.
pub trait Hooks: Send + Sync {
    /// A tick claimed `units` units (called only when it claimed any).
    fn claimed(&self, units: usize) {
        let _ = units;
    }

    /// A tick gave back `units` units (called only when it shed any).
    fn shed(&self, units: usize) {
        let _ = units;
    }

    /// A tick succeeded and took `took` (every successful tick).
    fn rebalanced(&self, took: Duration) {
        let _ = took;
    }

    /// After a successful tick, this process owns `units` units of total weight `weight`.
    fn owned(&self, units: usize, weight: i64) {
        let _ = (units, weight);
    }

    /// A heartbeat, tick or sweep of [`Leaser::run`](super::Leaser::run) failed (it goes on, or at
    /// startup ends with a permanent error).
    fn error(&self, error: &Error) {
        let _ = error;
    }
}

/// [`Hooks`] that observe nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_config_is_kept_with_its_defaults_filled_in() {
        let c = Config::default().validated().unwrap();
        assert_eq!(c.ttl, Duration::from_secs(15));
        assert_eq!((c.claim_batch, c.max_claim_per_tick), (64, 1024));
        assert!(c.process_id.is_some());
    }

    #[test]
    fn a_claim_batch_above_the_per_tick_cap_is_refused_not_clamped() {
        // A batch above the per-tick cap is refused, naming both, not clamped.
        let over = Config {
            claim_batch: 5000,
            ..Config::default()
        };
        let err = over.validated().unwrap_err();
        assert!(err.is_invalid_input());
        assert!(
            err.to_string().contains("claim_batch 5000")
                && err.to_string().contains("max_claim_per_tick 1024"),
            "{err}"
        );
        let at_cap = Config {
            claim_batch: 1024,
            ..Config::default()
        };
        assert_eq!(at_cap.validated().unwrap().claim_batch, 1024);
    }

    #[test]
    fn bad_or_zero_values_are_refused() {
        let refused = [
            Config {
                heartbeat_interval: Duration::from_secs(15),
                ..Config::default()
            },
            Config {
                sweep_cutoff: Duration::from_secs(10),
                ..Config::default()
            },
            Config {
                version: "1.0\0".into(),
                ..Config::default()
            },
            Config {
                process_id: Some("not-a-uuid".into()),
                ..Config::default()
            },
            Config {
                ttl: Duration::ZERO,
                ..Config::default()
            },
            Config {
                heartbeat_interval: Duration::ZERO,
                ..Config::default()
            },
            Config {
                rebalance_interval: Duration::ZERO,
                ..Config::default()
            },
            Config {
                sweep_interval: Duration::ZERO,
                ..Config::default()
            },
            Config {
                claim_batch: 0,
                ..Config::default()
            },
            Config {
                max_claim_per_tick: 0,
                ..Config::default()
            },
            Config {
                hostname: " ".into(),
                ..Config::default()
            },
            Config {
                warm_up: Some(Duration::from_secs(200 * 365 * 86_400)),
                ..Config::default()
            },
        ];
        for config in refused {
            let shown = format!("{config:?}");
            assert!(
                config.validated().unwrap_err().is_invalid_input(),
                "{shown}"
            );
        }
    }

    #[test]
    fn a_zero_warm_up_turns_the_probation_off_and_the_longest_wait_follows_the_settings() {
        let no_warm_up = Config {
            warm_up: Some(Duration::ZERO),
            ..Config::default()
        };
        let no_warm_up = no_warm_up.validated().unwrap();
        assert_eq!(no_warm_up.warm_up_wait(), Duration::ZERO);
        assert!(!no_warm_up.probation(), "zero turns the probation off");
        assert_eq!(
            Config::default().warm_up_wait(),
            Duration::ZERO,
            "no wall-clock wait by default"
        );
        assert!(Config::default().probation(), "a probation by default");
        // The longest cold-start wait: two heartbeat intervals when only settling is waited for
        // (never a TTL more: a crash-looping slot would hold every unit of a cold fleet that long),
        // a heartbeat interval, the warm-up and a TTL with a warm-up duration.
        let defaults = Config::default().validated().unwrap();
        assert_eq!(defaults.warm_up_most(), Duration::from_secs(10));
        let with_wait = Config {
            warm_up: Some(Duration::from_secs(3)),
            ..Config::default()
        };
        assert_eq!(
            with_wait.validated().unwrap().warm_up_most(),
            Duration::from_secs(5 + 3 + 15)
        );
    }
}
