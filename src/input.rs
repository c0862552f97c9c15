//! Checks on caller input, run before any statement is sent, so that refused input stores nothing.
//!
//! - Keys and names (job ids, fire keys, lease keys, owners) must not be blank (empty or only
//!   whitespace), must not contain a NUL byte (PostgreSQL `text` cannot store it), and must be at most
//!   [`MAX_KEY_BYTES`] bytes (a btree entry holds about 2.7 KB; 1,024 leaves room for the rest).
//! - Durations (TTLs, busy periods) must be at least [`MIN_DURATION`] and at most [`MAX_DURATION`];
//!   they are sent as whole microseconds, rounded up, so a sub-second TTL is kept exactly and the
//!   database never expires a grant before the holder's local deadline.
//! - Ticks must lie between 1970 and the end of year 9999.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// Longest key or name accepted, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// Shortest TTL or busy period accepted.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

/// Longest TTL or busy period accepted: 100 years of 365.25 days.
pub const MAX_DURATION: Duration = Duration::from_secs(36_525 * 24 * 3600);

/// Latest tick accepted: 9999-12-31T23:59:59Z.
const MAX_TICK_SECS: u64 = 253_402_300_799;

/// Refuses a blank, NUL-carrying or over-long key; `what` names it in the message ("job id").
pub(crate) fn check_key(what: &str, key: &str) -> Result<()> {
    // Stops at the first character that is not white space (a key's first, as a rule).
    if key.chars().all(char::is_whitespace) {
        return Err(Error::invalid_input(format!(
            "{what} is blank; give a non-empty name"
        )));
    }
    if key.as_bytes().contains(&0) {
        return Err(Error::invalid_input(format!(
            "{what} contains a NUL byte, which PostgreSQL text cannot store"
        )));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::invalid_input(format!(
            "{what} is {} bytes long; at most {MAX_KEY_BYTES} bytes are accepted (it is a primary key)",
            key.len()
        )));
    }
    Ok(())
}

/// Checks `d` against `[min, MAX_DURATION]` and returns it in whole microseconds, rounded up.
pub(crate) fn micros(what: &str, d: Duration, min: Duration) -> Result<i64> {
    if d < min {
        return Err(Error::invalid_input(format!(
            "{what} of {d:?} is too short; it must be at least {min:?}"
        )));
    }
    if d > MAX_DURATION {
        return Err(Error::invalid_input(format!(
            "{what} of {d:?} is too long; it must be at most 100 years"
        )));
    }
    // At most 100 years: about 3.2e15 microseconds, far inside i64 (and no 128-bit division).
    let us = d.as_secs() * 1_000_000 + u64::from(d.subsec_nanos().div_ceil(1_000));
    Ok(i64::try_from(us).expect("bounded by MAX_DURATION"))
}

/// Refuses a tick before 1970 or after year 9999 (outside what the driver converts safely).
pub(crate) fn check_tick(tick: SystemTime) -> Result<()> {
    match tick.duration_since(UNIX_EPOCH) {
        Ok(since) if since.as_secs() <= MAX_TICK_SECS => Ok(()),
        Ok(_) => Err(Error::invalid_input(
            "tick is after the year 9999; ticks are times near the database clock",
        )),
        Err(_) => Err(Error::invalid_input(
            "tick is before 1970; ticks are times near the database clock",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_be_present_storable_and_short() {
        assert!(check_key("job id", "nightly-report").is_ok());
        assert!(check_key("job id", " padded ").is_ok());
        assert!(check_key("job id", &"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(check_key("job id", "'; drop table x; --").is_ok());
        for bad in ["", " ", "\t\n", "\u{3000}\u{a0}", "a\0b", "\0"] {
            let err = check_key("job id", bad).expect_err(bad);
            assert!(err.is_invalid_input());
            assert!(err.to_string().starts_with("job id"), "{err}");
        }
        let long = "é".repeat(513); // 1,026 bytes in 513 chars
        assert!(check_key("lease key", &long)
            .unwrap_err()
            .is_invalid_input());
        assert!(check_key("lease key", &"k".repeat(100_000)).is_err());
    }

    #[test]
    fn durations_convert_to_microseconds_rounding_up() {
        assert_eq!(
            micros("ttl", Duration::from_millis(1), MIN_DURATION).unwrap(),
            1_000
        );
        assert_eq!(
            micros("ttl", Duration::from_millis(1500), MIN_DURATION).unwrap(),
            1_500_000
        );
        assert_eq!(
            micros("ttl", Duration::from_nanos(1_000_001), MIN_DURATION).unwrap(),
            1_001
        );
        // Rounding up the nanoseconds carries into the next second.
        assert_eq!(
            micros("ttl", Duration::new(2, 999_999_001), MIN_DURATION).unwrap(),
            3_000_000
        );
        assert_eq!(
            micros("ttl", MAX_DURATION, MIN_DURATION).unwrap(),
            3_155_760_000_000_000
        );
    }

    #[test]
    fn durations_out_of_range_are_refused() {
        for d in [Duration::ZERO, Duration::from_micros(999)] {
            assert!(micros("ttl", d, MIN_DURATION)
                .unwrap_err()
                .is_invalid_input());
        }
        let too_long = MAX_DURATION + Duration::from_secs(1);
        assert!(micros("ttl", too_long, MIN_DURATION)
            .unwrap_err()
            .is_invalid_input());
        assert!(micros("ttl", Duration::MAX, MIN_DURATION).is_err());
        let err = micros(
            "lease ttl",
            Duration::from_millis(20),
            Duration::from_millis(30),
        )
        .unwrap_err();
        assert!(err.to_string().contains("at least 30ms"), "{err}");
    }

    #[test]
    fn ticks_outside_1970_to_9999_are_refused() {
        assert!(check_tick(UNIX_EPOCH).is_ok());
        assert!(check_tick(UNIX_EPOCH + Duration::from_secs(1_800_000_000)).is_ok());
        assert!(check_tick(UNIX_EPOCH + Duration::from_secs(MAX_TICK_SECS)).is_ok());
        assert!(check_tick(UNIX_EPOCH + Duration::from_secs(MAX_TICK_SECS + 1)).is_err());
        assert!(check_tick(UNIX_EPOCH - Duration::from_secs(1)).is_err());
    }
}
