//! Database times as people read them: RFC 3339 in UTC, to the millisecond.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A time shown as RFC 3339 in UTC to the millisecond (`2026-12-01T21:53:47.123Z`), as the
/// operator views' `Display` writes their times; PostgreSQL's `infinity` and `-infinity` as those
/// words. Wrap any `SystemTime` to log it the same way:
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use pgtenure::Timestamp;
///
/// let t = UNIX_EPOCH + Duration::from_millis(1_764_625_427_123);
/// assert_eq!(Timestamp::new(t).to_string(), "2025-12-01T21:43:47.123Z");
/// assert_eq!(Timestamp::from(t).system_time(), t);
/// assert_eq!(SystemTime::from(Timestamp::new(t)), t);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(SystemTime);

impl Timestamp {
    /// Wraps `time` to show it.
    pub const fn new(time: SystemTime) -> Timestamp {
        Timestamp(time)
    }

    /// The time shown.
    pub const fn system_time(&self) -> SystemTime {
        self.0
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Timestamp {
        Timestamp(time)
    }
}

impl From<Timestamp> for SystemTime {
    fn from(timestamp: Timestamp) -> SystemTime {
        timestamp.0
    }
}

/// PostgreSQL's epoch, 2000-01-01, as seconds after the Unix one.
const POSTGRES_EPOCH_SECS: u64 = 946_684_800;

/// How the driver decodes PostgreSQL's `infinity` and `-infinity` (the largest and smallest
/// timestamps, in microseconds from PostgreSQL's epoch), when this platform's `SystemTime` holds
/// them.
fn infinities() -> (Option<SystemTime>, Option<SystemTime>) {
    let epoch = UNIX_EPOCH + Duration::from_secs(POSTGRES_EPOCH_SECS);
    let span = Duration::from_micros(i64::MAX as u64);
    let last = Duration::from_micros(i64::MIN.unsigned_abs());
    (epoch.checked_add(span), epoch.checked_sub(last))
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (infinity, minus_infinity) = infinities();
        if infinity.is_some_and(|infinity| self.0 >= infinity) {
            return f.write_str("infinity");
        }
        if minus_infinity.is_some_and(|minus| self.0 <= minus) {
            return f.write_str("-infinity");
        }
        let (secs, millis) = match self.0.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_millis()),
            Err(e) => {
                // Before 1970: down to the millisecond, as after it (999.5 ms before the epoch
                // is at .000 of the second before, 0.5 ms before it at .999).
                let d = e.duration();
                let before = d.subsec_nanos().div_ceil(1_000_000);
                let whole = d.as_secs() as i64 + i64::from(before > 0);
                (-whole, (1000 - before) % 1000)
            }
        };
        let days = secs.div_euclid(86_400);
        let of_day = secs.rem_euclid(86_400);
        let (year, month, day) = civil(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        )
    }
}

/// The proleptic Gregorian date of a day counted from 1970-01-01, by eras of 400 years (146,097
/// days) starting on March 1st, so that the leap day ends each era's year.
fn civil(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_to_the_millisecond() {
        let at = |secs: u64, millis: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis);
        let show = |t: SystemTime| Timestamp(t).to_string();
        assert_eq!(show(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(show(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(show(at(1_764_625_427, 123)), "2025-12-01T21:43:47.123Z");
        assert_eq!(show(at(4_107_542_399, 999)), "2100-02-28T23:59:59.999Z");
        assert_eq!(show(at(253_402_300_799, 0)), "9999-12-31T23:59:59.000Z");
        assert_eq!(
            show(UNIX_EPOCH - Duration::from_millis(1)),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn times_before_1970_are_cut_to_the_millisecond_below() {
        let before = |secs: u64, nanos: u32| UNIX_EPOCH - Duration::new(secs, nanos);
        let show = |t: SystemTime| Timestamp(t).to_string();
        // PostgreSQL keeps microseconds: a time 500 µs before a whole second is in the
        // millisecond below it, not a second earlier.
        assert_eq!(show(before(0, 500_000)), "1969-12-31T23:59:59.999Z");
        assert_eq!(show(before(1, 500_000)), "1969-12-31T23:59:58.999Z");
        assert_eq!(show(before(0, 999_500_000)), "1969-12-31T23:59:59.000Z");
        assert_eq!(show(before(1, 0)), "1969-12-31T23:59:59.000Z");
        assert_eq!(show(before(86_400, 1)), "1969-12-30T23:59:59.999Z");
    }
}
