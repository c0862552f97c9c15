//! One read of pgtenure's tables, what `/metrics` and the page both render: every section whose
//! table exists, against the database clock.

use std::time::{Duration, Instant, SystemTime};

use pgtenure::membership::{ProcessInfo, Units, Unowned};
use pgtenure::{Db, Elector, JobInfo, LeaderInfo, LeaseSummary, Leases, TickClaims};

use crate::cmd::status::section;
use crate::Failure;

/// The handles on the tables the global flags name, opened once.
#[derive(Debug)]
pub(super) struct Tables {
    pub(super) db: Db,
    pub(super) leases: Leases,
    pub(super) elector: Elector,
    pub(super) ticks: TickClaims,
    pub(super) units: Units,
    /// How many held leases to read, those closest to lapsing (`--max-series`).
    pub(super) soonest: usize,
}

/// The membership tables' section: the processes and the units nobody owns.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) processes: Vec<ProcessInfo>,
    pub(super) unowned: Unowned,
}

/// What one scrape read; a section is `None` when its table does not exist.
#[derive(Debug)]
pub(super) struct Snapshot {
    /// The database's clock when the read began.
    pub(super) now: SystemTime,
    pub(super) leases: Option<LeaseSummary>,
    pub(super) leaders: Option<Vec<LeaderInfo>>,
    pub(super) membership: Option<Membership>,
    pub(super) jobs: Option<Vec<JobInfo>>,
    /// How long the read took.
    pub(super) took: Duration,
}

impl Tables {
    /// Reads every table: six statements, each on a pooled connection of its own. The leases are
    /// counted on the server, and only the `soonest` closest to lapsing are sent
    /// ([`Leases::summary`]); the membership is read from the processes table and the claimable
    /// units only, never every unit ([`Units::unowned`]).
    pub(super) fn read(&self) -> Result<Snapshot, Failure> {
        let started = Instant::now();
        // Unnamed, in one round trip (behind a pooler as well).
        let rows = self.db.connection()?.query_typed("SELECT now()", &[])?;
        let now = rows
            .first()
            .map_or(SystemTime::UNIX_EPOCH, |row| row.get(0));
        let leases = section(self.leases.summary(self.soonest))?;
        let leaders = section(self.elector.leaders())?;
        let membership = match section(self.units.processes())? {
            Some(processes) => {
                section(self.units.unowned())?.map(|unowned| Membership { processes, unowned })
            }
            None => None,
        };
        let jobs = section(self.ticks.jobs())?;
        Ok(Snapshot {
            now,
            leases,
            leaders,
            membership,
            jobs,
            took: started.elapsed(),
        })
    }
}

impl Snapshot {
    /// Held leases beyond those read (`--max-series`): counted, without a series or a row.
    pub(super) fn unlisted_leases(&self) -> i64 {
        self.leases.as_ref().map_or(0, |leases| {
            (leases.held - leases.soonest.len() as i64).max(0)
        })
    }

    /// Seconds from the database's `now` to `t`: negative when `t` is past.
    pub(super) fn seconds_until(&self, t: SystemTime) -> f64 {
        match t.duration_since(self.now) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        }
    }
}

impl Membership {
    /// The live processes, oldest first.
    pub(super) fn live(&self) -> impl Iterator<Item = &ProcessInfo> {
        self.processes.iter().filter(|p| p.live)
    }

    /// The most units a live process owns less the fewest (0 with fewer than two), and the same
    /// for their weight.
    pub(super) fn spread(&self) -> (i64, i64) {
        let units = self.live().map(|p| i64::from(p.units));
        let weights = self.live().map(|p| p.weight);
        (range(units), range(weights))
    }

    /// The units each live process would own in a balanced fleet: those the live processes own
    /// and those nobody live owns (never claimed, released, or an expired process's), shared out
    /// among the live processes. `None` without a live process.
    pub(super) fn fair_share(&self) -> Option<f64> {
        let owned: i64 = self.live().map(|p| i64::from(p.units)).sum();
        fair_share(owned, self.unowned.units, self.live().count())
    }
}

/// `owned + unowned` units shared out among `live` processes; `None` when `live` is 0.
fn fair_share(owned: i64, unowned: i64, live: usize) -> Option<f64> {
    (live > 0).then(|| (owned + unowned.max(0)) as f64 / live as f64)
}

/// The largest value less the smallest; 0 when empty.
fn range(values: impl Iterator<Item = i64>) -> i64 {
    let (min, max) = values.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if min > max {
        0
    } else {
        max - min
    }
}

#[cfg(test)]
mod tests {
    use super::{fair_share, range};

    #[test]
    fn the_spread_is_the_largest_less_the_smallest() {
        assert_eq!(range([].into_iter()), 0);
        assert_eq!(range([4].into_iter()), 0);
        assert_eq!(range([4, 9, 1].into_iter()), 8);
    }

    /// Units nobody owns are work the live processes will share: a process that joined late,
    /// owning none beside two owning 4 while 4 wait, is the one below its share, not the others
    /// above it.
    #[test]
    fn the_fair_share_counts_the_units_nobody_owns() {
        assert_eq!(fair_share(8, 4, 3), Some(4.0));
        assert_eq!(fair_share(8, 0, 3), Some(8.0 / 3.0));
        assert_eq!(fair_share(0, 5, 2), Some(2.5));
        assert_eq!(fair_share(0, 5, 0), None);
    }
}
