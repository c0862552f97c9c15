//! What operators look at: every unit's owner, and every process ([`Units::assignments`],
//! [`Units::processes`]).

use std::time::SystemTime;

use super::unit::Unit;
use super::units::Units;
use crate::error::Result;

/// One registered unit and who owns it ([`Units::assignments`]).
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

/// One process row ([`Units::processes`]).
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
    /// How many units it reports owning (as of its last heartbeat or claim).
    pub units: i32,
    /// Their total weight.
    pub weight: i64,
}

impl Units {
    /// Every registered unit with its weight, owner and token, in unit order, in one statement that
    /// reads the whole units table (an operator's view, not something to poll in a loop).
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn assignments(&self) -> Result<Vec<Assignment>> {
        self.sql.assignments(&self.db)
    }

    /// Every process row, live or expired (until the sweep deletes it), oldest first.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.sql.processes(&self.db)
    }
}
