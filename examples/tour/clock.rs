//! The tour's clock: a schedule's boundaries by this machine's clock, and how times are shown.

use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// The next multiple of `period` since the Unix epoch, by this machine's clock (the schedule).
pub fn next_boundary(period: Duration) -> SystemTime {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let period_ns = period.as_nanos();
    let next = (now.as_nanos() / period_ns + 1) * period_ns;
    UNIX_EPOCH + Duration::from_nanos(u64::try_from(next).unwrap())
}

pub fn sleep_until(at: SystemTime) {
    if let Ok(wait) = at.duration_since(SystemTime::now()) {
        thread::sleep(wait);
    }
}

/// `HH:MM:SS.mmm` in UTC.
pub fn clock(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap();
    let secs = since.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        since.subsec_millis()
    )
}
