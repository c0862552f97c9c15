//! Cron schedules (feature `cron`): the ticks of a cron expression in a time zone.
//!
//! `croner` parses the expression (the POSIX fields, an optional leading seconds field, `L`, `W`
//! and `#`) and finds the occurrences; `jiff` resolves the time zone from the system's time zone
//! database, so a daylight-saving change moves the wall-clock ticks as a local cron would.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::error::{Error, Result};

/// A parsed cron expression and the time zone its fields are read in.
pub(super) struct CronTicks {
    expr: String,
    zone_name: String,
    cron: Cron,
    zone: TimeZone,
}

impl CronTicks {
    /// Parses `expr` for the zone named `zone` (`"UTC"`, or an IANA name).
    pub(super) fn parse(expr: &str, zone: &str) -> Result<CronTicks> {
        if expr.contains('\0') || zone.contains('\0') {
            return Err(Error::invalid_input(
                "a cron expression or time zone contains a NUL byte",
            ));
        }
        let cron: Cron = expr.parse().map_err(|e| {
            Error::invalid_input(format!(
                "cron expression {expr:?} does not parse: {e}; write minute, hour, day of month, \
                 month and day of week (a leading seconds field is optional)"
            ))
        })?;
        let tz = if zone == "UTC" {
            TimeZone::UTC
        } else {
            TimeZone::get(zone).map_err(|e| {
                Error::invalid_input(format!(
                    "time zone {zone:?} is not known here: {e}; give an IANA name such as \
                     \"Europe/Paris\" (the system's time zone database must have it)"
                ))
            })?
        };
        let ticks = CronTicks {
            expr: expr.trim().to_owned(),
            zone_name: zone.to_owned(),
            cron,
            zone: tz,
        };
        if ticks.after(UNIX_EPOCH).is_none() {
            return Err(Error::invalid_input(format!(
                "cron expression {expr:?} never matches a time"
            )));
        }
        Ok(ticks)
    }

    fn zoned(&self, t: SystemTime) -> Option<Zoned> {
        Some(Timestamp::try_from(t).ok()?.to_zoned(self.zone.clone()))
    }

    /// The latest tick at or before `t`, if any.
    pub(super) fn at_or_before(&self, t: SystemTime) -> Option<SystemTime> {
        let found = self
            .cron
            .find_previous_occurrence(&self.zoned(t)?, true)
            .ok()?;
        Some(SystemTime::from(found.timestamp()))
    }

    /// The first tick after `t`, if any.
    pub(super) fn after(&self, t: SystemTime) -> Option<SystemTime> {
        let found = self
            .cron
            .find_next_occurrence(&self.zoned(t)?, false)
            .ok()?;
        Some(SystemTime::from(found.timestamp()))
    }
}

impl PartialEq for CronTicks {
    fn eq(&self, other: &CronTicks) -> bool {
        self.expr == other.expr && self.zone_name == other.zone_name
    }
}

impl Eq for CronTicks {}

impl fmt::Debug for CronTicks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cron")
            .field("expr", &self.expr)
            .field("zone", &self.zone_name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis)
    }

    #[test]
    fn five_fields_tick_on_the_minute_and_six_on_the_second() {
        let minutely = CronTicks::parse("* * * * *", "UTC").unwrap();
        assert_eq!(minutely.at_or_before(at(125, 500)), Some(at(120, 0)));
        assert_eq!(minutely.at_or_before(at(120, 0)), Some(at(120, 0)));
        assert_eq!(minutely.after(at(120, 0)), Some(at(180, 0)));
        assert_eq!(minutely.after(at(125, 500)), Some(at(180, 0)));
        let every_5s = CronTicks::parse("*/5 * * * * *", "UTC").unwrap();
        assert_eq!(every_5s.at_or_before(at(123, 999)), Some(at(120, 0)));
        assert_eq!(every_5s.after(at(123, 999)), Some(at(125, 0)));
    }

    #[test]
    fn a_time_zone_moves_wall_clock_ticks_with_daylight_saving() {
        // 09:00 in Paris: 08:00 UTC in winter (UTC+1), 07:00 UTC in summer (UTC+2).
        let paris = CronTicks::parse("0 9 * * *", "Europe/Paris").unwrap();
        let jan_1_2026 = 1_767_225_600; // 2026-01-01T00:00:00Z
        assert_eq!(
            paris.after(at(jan_1_2026, 0)),
            Some(at(jan_1_2026 + 8 * 3600, 0))
        );
        let jul_1_2026 = 1_782_864_000; // 2026-07-01T00:00:00Z
        assert_eq!(
            paris.after(at(jul_1_2026, 0)),
            Some(at(jul_1_2026 + 7 * 3600, 0))
        );
    }

    #[test]
    fn across_daylight_saving_changes_ticks_follow_cron() {
        // On 2026-10-25 Paris goes back from 03:00 CEST to 02:00 CET (01:00 UTC): 02:30 occurs at
        // 00:30 UTC and again at 01:30 UTC. A fixed time ticks once, at its first occurrence (as
        // cron does: a daily job does not run twice); an hour wildcard ticks in both hours.
        let daily = CronTicks::parse("30 2 * * *", "Europe/Paris").unwrap();
        let first = at(1_792_888_200, 0); // 2026-10-25T00:30:00Z, 02:30 CEST
        let second = at(1_792_891_800, 0); // 2026-10-25T01:30:00Z, 02:30 CET
        assert_eq!(daily.after(first - Duration::from_secs(1)), Some(first));
        assert_eq!(
            daily.after(first),
            Some(first + Duration::from_secs(86_400 + 3600))
        );
        let hourly = CronTicks::parse("30 * * * *", "Europe/Paris").unwrap();
        assert_eq!(hourly.after(first), Some(second), "both 02:30s");
        // On 2026-03-29 Paris skips from 02:00 CET to 03:00 CEST (01:00 UTC): 02:30 never occurs.
        let night = at(1_774_742_400, 0); // 2026-03-29T00:00:00Z, 01:00 CET
                                          // A fixed time skipped by the change ticks at the change, 03:00 CEST, as cron runs it.
        assert_eq!(daily.after(night), Some(night + Duration::from_secs(3600)));
    }

    #[test]
    fn bad_expressions_zones_and_impossible_dates_are_refused() {
        for bad in ["", "* * *", "61 * * * *", "nonsense"] {
            let e = CronTicks::parse(bad, "UTC").unwrap_err();
            assert!(e.is_invalid_input(), "{bad:?}: {e}");
            assert!(e.to_string().contains("does not parse"), "{e}");
        }
        let e = CronTicks::parse("* * * * *", "Mars/Olympus_Mons").unwrap_err();
        assert!(e.to_string().contains("not known"), "{e}");
        let e = CronTicks::parse("0 0 30 2 *", "UTC").unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
    }
}
