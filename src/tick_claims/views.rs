//! The operator's view of a tick-claim table: one row per job.

use std::fmt;
use std::time::SystemTime;

use super::sql::JobRow;
#[cfg(doc)]
use super::TickClaim;
use super::TickClaims;
use crate::error::Result;
use crate::timestamp::Timestamp;

/// One job's row ([`TickClaims::jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobInfo {
    /// The job's id.
    pub job_id: String,
    /// The last tick claimed.
    pub tick: SystemTime,
    /// Who claimed it ([`TickClaims::with_owner`]).
    pub owner: String,
    /// Its claim counter ([`TickClaim::token`]).
    pub token: i64,
    /// Until when that run keeps the job busy (database time); `None` once released.
    pub busy_until: Option<SystemTime>,
    /// Whether the job is busy now by the database clock (later ticks are refused until then).
    pub busy: bool,
}

/// `job "report": tick 2026-12-03T06:00:00.000Z claimed by worker-1 (token 12), busy until
/// 2026-12-03T06:01:00.000Z`, or `…, idle` once its run is over.
impl fmt::Display for JobInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "job {:?}: tick {} claimed by {} (token {}), ",
            self.job_id,
            Timestamp::new(self.tick),
            self.owner,
            self.token
        )?;
        match self.busy_until {
            Some(until) if self.busy => write!(f, "busy until {}", Timestamp::new(until)),
            _ => f.write_str("idle"),
        }
    }
}

impl From<JobRow> for JobInfo {
    fn from(row: JobRow) -> JobInfo {
        JobInfo {
            job_id: row.job_id,
            tick: row.tick,
            owner: row.owner,
            token: row.token,
            busy_until: row.busy_until,
            busy: row.busy,
        }
    }
}

impl TickClaims {
    /// Every job in this table, in job id order: its last claimed tick, who claimed it with which
    /// token, and whether that run is busy now by the database clock. One statement that reads the
    /// whole table (one row per job): an operator's view, not something to poll in a loop.
    ///
    /// # Errors
    ///
    /// A database or connection error (an undefined-table error when the table does not exist).
    pub fn jobs(&self) -> Result<Vec<JobInfo>> {
        let rows = self.sql.jobs(&self.db)?;
        Ok(rows.into_iter().map(JobInfo::from).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_job_prints_as_a_log_line_with_rfc_3339_times() {
        let mut job = JobInfo {
            job_id: "report".into(),
            tick: SystemTime::UNIX_EPOCH,
            owner: "worker-1".into(),
            token: 12,
            busy_until: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(60)),
            busy: true,
        };
        assert_eq!(
            job.to_string(),
            "job \"report\": tick 1970-01-01T00:00:00.000Z claimed by worker-1 (token 12), busy \
             until 1970-01-01T00:01:00.000Z"
        );
        job.busy = false;
        assert!(job.to_string().ends_with("(token 12), idle"));
    }
}
