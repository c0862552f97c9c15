//! What operators look at: every unit's owner, every process, and the units nobody owns
//! ([`Units::assignments`](super::Units::assignments), [`Units::processes`](super::Units::processes),
//! [`Units::unowned`](super::Units::unowned), which read them in `units.rs`).

use std::fmt;
use std::time::SystemTime;

use super::unit::Unit;
use crate::timestamp::Timestamp;

/// One registered unit and who owns it ([`Units::assignments`](super::Units::assignments)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Assignment {
    /// The unit.
    pub unit: Unit,
    /// Its weight (0: disabled, never claimed).
    pub weight: i32,
    /// The process the unit's row names (UUID text), live or not; `None` when unowned.
    pub owner: Option<String>,
    /// Whether that process is live by the database clock; a unit of an expired owner is claimable.
    pub owner_live: bool,
    /// The fencing token of the unit's latest claim; `None` if never claimed.
    pub token: Option<i64>,
    /// When the owner claimed it (database time); `None` when unowned.
    pub claimed_at: Option<SystemTime>,
}

/// One process row ([`Units::processes`](super::Units::processes)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// The process id (UUID text), as [`Leaser::process_id`](super::Leaser::process_id).
    pub id: String,
    /// The host it runs on, as configured ([`Config`](super::Config)).
    pub hostname: String,
    /// The version it reported.
    pub version: String,
    /// Its first heartbeat (database time).
    pub started_at: SystemTime,
    /// When it expires unless it heartbeats again (database time).
    pub expires_at: SystemTime,
    /// Whether it is live by the database clock.
    pub live: bool,
    /// Whether it has settled: it heartbeated a second time (or was configured without a
    /// probation), so it counts in the fair share, claims and is shed to (see
    /// [`Config::warm_up`](super::Config::warm_up)). A live process that never settles is an
    /// instance dying within a heartbeat interval of its start (a crash loop).
    pub settled: bool,
    /// How many units it reports owning (as of its last heartbeat or claim).
    pub units: i32,
    /// Their total weight.
    pub weight: i64,
}

/// The enabled units no live process owns ([`Units::unowned`](super::Units::unowned)): never claimed, released, or owned
/// by a process that expired. Any live process may claim them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unowned {
    /// How many.
    pub units: i64,
    /// Their total weight.
    pub weight: i64,
}

/// `unit acme/3 (weight 1): owned by 0b6c…-… (token 9) since 2026-12-03T06:00:00.000Z`, with
/// `, whose process expired` when the owner is not live, or `unit acme/3 (weight 1): unowned`.
impl fmt::Display for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unit {} (weight {}): ", self.unit, self.weight)?;
        let Some(owner) = &self.owner else {
            return f.write_str("unowned");
        };
        write!(f, "owned by {owner}")?;
        if let Some(token) = self.token {
            write!(f, " (token {token})")?;
        }
        if let Some(at) = self.claimed_at {
            write!(f, " since {}", Timestamp::new(at))?;
        }
        if !self.owner_live {
            f.write_str(", whose process expired")?;
        }
        Ok(())
    }
}

/// `process 0b6c…-… on host-1 (version 2.3): live until 2026-12-03T06:00:15.000Z, 125 units
/// (weight 125), started 2026-12-03T05:00:00.000Z`, or `expired at …`.
impl fmt::Display for ProcessInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} on {} (version {}): {} {}, {} units (weight {}), started {}",
            self.id,
            self.hostname,
            self.version,
            match (self.live, self.settled) {
                (true, true) => "live until",
                (true, false) => "live, not yet settled, until",
                (false, _) => "expired at",
            },
            Timestamp::new(self.expires_at),
            self.units,
            self.weight,
            Timestamp::new(self.started_at)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn assignments_and_processes_print_as_log_lines_with_rfc_3339_times() {
        let mut owned = Assignment {
            unit: Unit::new("acme", 3).unwrap(),
            weight: 1,
            owner: Some("p-1".into()),
            owner_live: true,
            token: Some(9),
            claimed_at: Some(UNIX_EPOCH),
        };
        assert_eq!(
            owned.to_string(),
            "unit acme/3 (weight 1): owned by p-1 (token 9) since 1970-01-01T00:00:00.000Z"
        );
        owned.owner_live = false;
        assert!(owned.to_string().ends_with(", whose process expired"));
        owned.owner = None;
        assert_eq!(owned.to_string(), "unit acme/3 (weight 1): unowned");
        let mut process = ProcessInfo {
            id: "p-1".into(),
            hostname: "host-1".into(),
            version: "2.3".into(),
            started_at: UNIX_EPOCH,
            expires_at: UNIX_EPOCH + Duration::from_secs(15),
            live: true,
            settled: true,
            units: 125,
            weight: 125,
        };
        assert_eq!(
            process.to_string(),
            "process p-1 on host-1 (version 2.3): live until 1970-01-01T00:00:15.000Z, 125 units \
             (weight 125), started 1970-01-01T00:00:00.000Z"
        );
        process.settled = false;
        assert!(process
            .to_string()
            .contains(": live, not yet settled, until 1970-01-01T00:00:15.000Z"));
        process.live = false;
        assert!(process
            .to_string()
            .contains(": expired at 1970-01-01T00:00:15.000Z"));
    }
}
