//! When a job's ticks fall: a fixed period, or a cron expression (feature `cron`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::input::{micros, MIN_DURATION};

/// When a job's ticks fall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Every(Duration),
    #[cfg(feature = "cron")]
    Cron(std::sync::Arc<super::cron::CronTicks>),
}

impl Schedule {
    /// Every `period`, at whole multiples of it since the Unix epoch (every minute: on the minute),
    /// so every instance computes the same ticks.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when `period` is under 1 ms or
    /// over 100 years.
    pub fn every(period: Duration) -> Result<Schedule> {
        micros("schedule period", period, MIN_DURATION)?;
        Ok(Schedule {
            kind: Kind::Every(period),
        })
    }

    /// The ticks of a cron expression, read in UTC (feature `cron`): five fields (minute, hour,
    /// day of month, month, day of week) as in crontab, or six with a leading seconds field;
    /// `L`, `W` and `#` as in Quartz. A day of month and a day of week both given match either,
    /// as in crontab.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::error::ErrorKind::InvalidInput) when the expression does not
    /// parse or never matches a time.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron(expr: &str) -> Result<Schedule> {
        Schedule::cron_in(expr, "UTC")
    }

    /// The ticks of a cron expression read in the time zone `zone`, an IANA name such as
    /// `"Europe/Paris"` looked up in the system's time zone database (feature `cron`). Across a
    /// daylight-saving change the ticks follow the wall clock as cron's do: a fixed time skipped by
    /// the change ticks at the change (`30 2 * * *` at 03:00 on the spring night in Paris), a
    /// fixed time that occurs twice ticks once, at its first occurrence (a daily job does not run
    /// twice), and an expression whose hour is a wildcard or a step ticks in both hours. Every
    /// instance of a fleet must give the same zone, or they compute different ticks.
    ///
    /// # Errors
    ///
    /// As [`Schedule::cron`], and when the zone is not known here.
    #[cfg(feature = "cron")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cron")))]
    pub fn cron_in(expr: &str, zone: &str) -> Result<Schedule> {
        Ok(Schedule {
            kind: Kind::Cron(std::sync::Arc::new(super::cron::CronTicks::parse(
                expr, zone,
            )?)),
        })
    }

    /// The time between ticks of a schedule made by [`Schedule::every`]; `None` for a cron
    /// schedule, whose gaps vary.
    pub fn period(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Every(period) => Some(*period),
            #[cfg(feature = "cron")]
            Kind::Cron(_) => None,
        }
    }

    /// The latest tick at or before `t`, if there is one.
    pub(crate) fn at_or_before(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.kind {
            Kind::Every(period) => {
                let since = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
                let period = period.as_micros().max(1);
                Some(UNIX_EPOCH + Duration::from_micros((since / period * period) as u64))
            }
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.at_or_before(t),
        }
    }

    /// The first tick after `t`, if there is one.
    pub(crate) fn after(&self, t: SystemTime) -> Option<SystemTime> {
        match &self.kind {
            Kind::Every(period) => Some(self.at_or_before(t)? + *period),
            #[cfg(feature = "cron")]
            Kind::Cron(cron) => cron.after(t),
        }
    }

    /// The time from `tick` to the tick after it (a day when none follows).
    pub(crate) fn gap_after(&self, tick: SystemTime) -> Duration {
        self.after(tick)
            .and_then(|next| next.duration_since(tick).ok())
            .unwrap_or(Duration::from_secs(86_400))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn ticks_fall_on_whole_multiples_of_the_period() {
        let every = Schedule::every(Duration::from_secs(60)).unwrap();
        assert_eq!(every.at_or_before(at(125, 500)), Some(at(120, 0)));
        assert_eq!(every.after(at(125, 500)), Some(at(180, 0)));
        assert_eq!(every.after(at(120, 0)), Some(at(180, 0)));
        assert_eq!(every.period(), Some(Duration::from_secs(60)));
        assert!(Schedule::every(Duration::ZERO)
            .unwrap_err()
            .is_invalid_input());
    }
}
