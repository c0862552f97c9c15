//! A leaser's configuration and its metrics hooks: timing and claim sizing, validated in one place.

use std::fmt;
use std::time::Duration;

use super::local::stop_after;
use crate::error::{Error, Result};
use crate::input::{check_key, micros, MIN_DURATION};
use crate::instance::{hostname, parse_uuid, random_uuid};

/// A [`Leaser`](super::Leaser)'s timing and claim sizing. Zero values take the defaults.
///
/// Build it from `Config::default()` and set the fields you need.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// Stored in the process row once, for operators. Defaults to this machine's host name.
    pub hostname: String,
    /// Stored in the process row once, for operators. Defaults to `"unknown"`.
    pub version: String,
    /// The process id, UUID text; `None` draws a random one. Defaults to `None`.
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
    /// Ignored: balance is exact (see [`Leaser::tick`](super::Leaser::tick)), so there is no band to tolerate. A band
    /// around the fair share never settled when shares were small. Still checked (finite, at least
    /// 0) so that configurations keep their meaning until the field is removed. Defaults to 0.2.
    #[deprecated(note = "ignored: membership balance is exact; the field will be removed")]
    pub shed_hysteresis: f64,
    /// The most units one claim statement takes; clamped to `max_claim_per_tick`. Defaults to 64.
    pub claim_batch: u32,
    /// The most units (by weight) one tick claims. Defaults to 1,024.
    pub max_claim_per_tick: u32,
}

impl Default for Config {
    #[allow(deprecated)]
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
            shed_hysteresis: 0.2,
            claim_batch: 64,
            max_claim_per_tick: 1024,
        }
    }
}

impl Config {
    /// Replaces zero values with the defaults and checks the rest.
    #[allow(deprecated)]
    pub(super) fn normalized(mut self) -> Result<Config> {
        let defaults = Config::default();
        let or_default =
            |value: Duration, default: Duration| if value.is_zero() { default } else { value };
        self.ttl = or_default(self.ttl, defaults.ttl);
        self.heartbeat_interval = or_default(self.heartbeat_interval, defaults.heartbeat_interval);
        self.rebalance_interval = or_default(self.rebalance_interval, defaults.rebalance_interval);
        self.sweep_interval = or_default(self.sweep_interval, defaults.sweep_interval);
        self.sweep_cutoff = or_default(self.sweep_cutoff, defaults.sweep_cutoff);
        if self.max_claim_per_tick == 0 {
            self.max_claim_per_tick = defaults.max_claim_per_tick;
        }
        if self.claim_batch == 0 {
            self.claim_batch = defaults.claim_batch;
        }
        self.claim_batch = self.claim_batch.min(self.max_claim_per_tick);
        if self.hostname.trim().is_empty() {
            self.hostname = defaults.hostname;
        }
        if self.version.trim().is_empty() {
            self.version = defaults.version;
        }
        check_key("hostname", &self.hostname)?;
        check_key("version", &self.version)?;
        micros("membership ttl", self.ttl, MIN_DURATION)?;
        micros("sweep cutoff", self.sweep_cutoff, MIN_DURATION)?;
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
        if !self.shed_hysteresis.is_finite() || self.shed_hysteresis < 0.0 {
            return Err(Error::invalid_input(format!(
                "shed hysteresis {} must be a finite number at least 0",
                self.shed_hysteresis
            )));
        }
        if self.max_claim_per_tick > i32::MAX as u32 {
            return Err(Error::invalid_input("max_claim_per_tick is above 2^31 - 1"));
        }
        self.process_id = Some(match self.process_id.take() {
            Some(id) => parse_uuid(&id)?,
            None => random_uuid(),
        });
        Ok(self)
    }
}

/// Optional observers for metrics; `None` is skipped.
#[derive(Default)]
pub struct Hooks {
    /// Units claimed by a tick (called when it claimed any).
    pub claimed: Option<Box<dyn Fn(usize) + Send + Sync>>,
    /// Units shed by a tick (called when it shed any).
    pub shed: Option<Box<dyn Fn(usize) + Send + Sync>>,
    /// How long a tick took (every successful tick).
    pub rebalanced: Option<Box<dyn Fn(Duration) + Send + Sync>>,
    /// Units and weight owned after a tick (every successful tick).
    pub owned: Option<Box<dyn Fn(usize, i64) + Send + Sync>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("claimed", &self.claimed.is_some())
            .field("shed", &self.shed.is_some())
            .field("rebalanced", &self.rebalanced.is_some())
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(deprecated)]
    fn zero_config_values_take_the_defaults_and_bad_ones_are_refused() {
        let zero = Config {
            ttl: Duration::ZERO,
            heartbeat_interval: Duration::ZERO,
            claim_batch: 0,
            max_claim_per_tick: 0,
            ..Config::default()
        };
        let c = zero.normalized().unwrap();
        assert_eq!(c.ttl, Duration::from_secs(15));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(5));
        assert_eq!((c.claim_batch, c.max_claim_per_tick), (64, 1024));
        assert!(c.process_id.is_some());

        let clamp = Config {
            claim_batch: 5000,
            ..Config::default()
        };
        assert_eq!(
            clamp.normalized().unwrap().claim_batch,
            1024,
            "clamped to the per-tick cap"
        );

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
                shed_hysteresis: -0.1,
                ..Config::default()
            },
            Config {
                shed_hysteresis: f64::NAN,
                ..Config::default()
            },
            Config {
                shed_hysteresis: f64::INFINITY,
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
        ];
        for config in refused {
            let shown = format!("{config:?}");
            assert!(
                config.normalized().unwrap_err().is_invalid_input(),
                "{shown}"
            );
        }
    }
}
