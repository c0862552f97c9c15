//! Who leads: the operator's views of an elector's table.

use std::fmt;
use std::time::SystemTime;

use super::sql::LeaderRow;
use super::Elector;
use crate::error::Result;
use crate::timestamp::Timestamp;

/// Who leads a fleet, by the database clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// The fleet's name ([`Elector::with_name`]).
    pub name: String,
    /// The leader's holder name.
    pub holder: String,
    /// The tenure's term.
    pub term: i64,
    /// When this tenure began.
    pub elected_at: SystemTime,
    /// When it expires unless renewed.
    pub expires_at: SystemTime,
    /// Whether the tenure is live by the database clock. Always `true` from [`Elector::leader`] and
    /// [`LeaderEvent::Observed`](super::LeaderEvent::Observed); [`Elector::leaders`] also lists fleets whose last tenure expired
    /// or was resigned (`false`: nobody leads that fleet now).
    pub live: bool,
    /// Whether the leader was asked to step down ([`Elector::request_resign`]): at its next
    /// renewal it stops believing, then resigns (or its tenure runs out at the expiry shown, which
    /// that renewal does not extend). Read by [`Elector::leader`] and
    /// [`Elector::leaders`]; a campaign's poll does not read it (`false` there).
    pub resign_requested: bool,
}

/// `fleet "billing": led by node-2 (term 7) since 2026-12-03T06:00:00.000Z until
/// 2026-12-03T06:00:30.000Z`, `, asked to resign` when it was; `nobody leads (last: …, ended …)`
/// when the tenure is over.
impl fmt::Display for LeaderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, holder, term) = (&self.name, &self.holder, self.term);
        if self.live {
            write!(
                f,
                "fleet {name:?}: led by {holder} (term {term}) since {} until {}",
                Timestamp::new(self.elected_at),
                Timestamp::new(self.expires_at)
            )?;
            if self.resign_requested {
                f.write_str(", asked to resign")?;
            }
            Ok(())
        } else {
            write!(
                f,
                "fleet {name:?}: nobody leads (last: {holder}, term {term}, ended {})",
                Timestamp::new(self.expires_at)
            )
        }
    }
}

impl From<LeaderRow> for LeaderInfo {
    fn from(row: LeaderRow) -> LeaderInfo {
        LeaderInfo {
            name: row.name,
            holder: row.holder,
            term: row.term,
            elected_at: row.elected_at,
            expires_at: row.expires_at,
            live: row.live,
            resign_requested: row.resign_requested,
        }
    }
}

impl Elector {
    /// Who leads the fleet now by the database clock, or `None`.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn leader(&self) -> Result<Option<LeaderInfo>> {
        Ok(self.sql.leader(&self.db, &self.name)?.map(LeaderInfo::from))
    }

    /// Every fleet in this elector's table, in name order, with its leader: live leaders, and the
    /// last tenure of fleets nobody leads now ([`LeaderInfo::live`] false). Liveness is decided by
    /// the database clock. One statement that reads the whole table (one row per fleet): an
    /// operator's view, not something to poll in a loop. This elector's own name does not matter.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn leaders(&self) -> Result<Vec<LeaderInfo>> {
        let rows = self.sql.leaders(&self.db)?;
        Ok(rows.into_iter().map(LeaderInfo::from).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_leader_prints_as_a_log_line_with_rfc_3339_times() {
        let mut info = LeaderInfo {
            name: "billing".into(),
            holder: "node-2".into(),
            term: 7,
            elected_at: std::time::UNIX_EPOCH,
            expires_at: std::time::UNIX_EPOCH + Duration::from_secs(30),
            live: true,
            resign_requested: true,
        };
        assert_eq!(
            info.to_string(),
            "fleet \"billing\": led by node-2 (term 7) since 1970-01-01T00:00:00.000Z until \
             1970-01-01T00:00:30.000Z, asked to resign"
        );
        info.live = false;
        assert_eq!(
            info.to_string(),
            "fleet \"billing\": nobody leads (last: node-2, term 7, ended \
             1970-01-01T00:00:30.000Z)"
        );
    }
}
