//! The command's own checks of what the library would refuse, made before anything connects (a
//! usage error, exit 2): a lease key, an owner name, a managed lease's TTL. The limits are the
//! library's ([`pgtenure::MAX_KEY_BYTES`], [`pgtenure::MAX_DURATION`],
//! [`pgtenure::leases::MIN_MANAGED_TTL`]), and so are the words.

use std::time::Duration;

use pgtenure::leases::MIN_MANAGED_TTL;
use pgtenure::{MAX_DURATION, MAX_KEY_BYTES};

/// A key or name (`what` names it): not blank, no NUL byte, at most [`MAX_KEY_BYTES`] bytes.
pub(crate) fn check_key(what: &str, key: &str) -> Result<(), String> {
    if key.trim().is_empty() {
        return Err(format!("{what} is blank; give a non-empty name"));
    }
    if key.contains('\0') {
        return Err(format!(
            "{what} contains a NUL byte, which PostgreSQL text cannot store"
        ));
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "{what} is {} bytes long; at most {MAX_KEY_BYTES} bytes are accepted (it is a primary key)",
            key.len()
        ));
    }
    Ok(())
}

/// A managed lease's TTL: [`MIN_MANAGED_TTL`] (30 ms) to [`MAX_DURATION`] (100 years).
pub(crate) fn check_managed_ttl(ttl: Duration) -> Result<(), String> {
    if ttl < MIN_MANAGED_TTL {
        return Err(format!(
            "managed lease ttl of {ttl:?} is too short; it must be at least {MIN_MANAGED_TTL:?}"
        ));
    }
    if ttl > MAX_DURATION {
        return Err(format!(
            "managed lease ttl of {ttl:?} is too long; it must be at most 100 years"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ttls_are_checked_as_the_library_checks_them() {
        assert!(check_key("lease key", "k").is_ok());
        assert!(check_key("lease key", &"k".repeat(MAX_KEY_BYTES)).is_ok());
        for bad in ["", "  ", "a\0b", &"k".repeat(MAX_KEY_BYTES + 1)] {
            assert!(check_key("lease key", bad).is_err(), "{bad:?}");
        }
        assert!(check_managed_ttl(MIN_MANAGED_TTL).is_ok());
        assert!(check_managed_ttl(MAX_DURATION).is_ok());
        let short = check_managed_ttl(Duration::from_millis(10)).unwrap_err();
        assert!(short.contains("too short"), "{short}");
        assert!(check_managed_ttl(MAX_DURATION + Duration::from_micros(1)).is_err());
    }
}
