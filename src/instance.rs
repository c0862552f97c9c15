//! Who an instance is: the owner name written into claim and lease rows.
//!
//! The default is `"{hostname}-{pid}-{random hex}"`. Hostname alone repeats across replicas of a
//! container image and pid alone repeats across containers (both caused double runs in peers:
//! ShedLock #317, oban-py #32), so a random part makes every process, and every handle, distinct.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A fresh owner name: `"{hostname}-{pid}-{16 random hex digits}"`.
pub(crate) fn default_owner() -> String {
    format!(
        "{}-{}-{:016x}",
        hostname(),
        std::process::id(),
        random_u64()
    )
}

/// The machine's host name, from the kernel or the environment; `"unknown-host"` when neither says.
pub(crate) fn hostname() -> String {
    let from_file = |path: &str| std::fs::read_to_string(path).ok();
    from_file("/proc/sys/kernel/hostname")
        .or_else(|| from_file("/etc/hostname"))
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains('\0'))
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// 64 random bits without a dependency: std's `RandomState` is seeded from the operating system's
/// randomness once per thread and stepped for every new instance; a process-wide counter is mixed in
/// so that two calls never hash the same input.
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A random version-4 UUID as text.
pub(crate) fn random_uuid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// Checks UUID text (`8-4-4-4-12` hex digits) and lowercases it.
pub(crate) fn parse_uuid(id: &str) -> Result<String> {
    let well_formed = id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    if !well_formed {
        return Err(Error::invalid_input(format!(
            "process id {id:?} is not a UUID (8-4-4-4-12 hexadecimal digits)"
        )));
    }
    Ok(id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_owners_are_distinct_and_well_formed() {
        let a = default_owner();
        let b = default_owner();
        assert_ne!(a, b);
        let pid = std::process::id().to_string();
        assert!(a.contains(&format!("-{pid}-")), "{a}");
        let hex = a.rsplit('-').next().unwrap();
        assert_eq!(hex.len(), 16);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(crate::input::check_key("owner", &a).is_ok());
    }

    #[test]
    fn random_values_do_not_repeat() {
        let values: std::collections::HashSet<u64> = (0..10_000).map(|_| random_u64()).collect();
        assert_eq!(values.len(), 10_000);
    }

    #[test]
    fn random_uuids_are_well_formed_version_4() {
        let id = random_uuid();
        assert_eq!(parse_uuid(&id).unwrap(), id);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(random_uuid(), random_uuid());
    }

    #[test]
    fn process_ids_must_be_uuids() {
        assert_eq!(
            parse_uuid("6F9619FF-8B86-D011-B42D-00C04FC964FF").unwrap(),
            "6f9619ff-8b86-d011-b42d-00c04fc964ff"
        );
        for bad in [
            "",
            "not-a-uuid",
            "6f9619ff8b86d011b42d00c04fc964ff",
            "6f9619ff-8b86-d011-b42d-00c04fc964fg",
        ] {
            assert!(parse_uuid(bad).unwrap_err().is_invalid_input(), "{bad:?}");
        }
    }
}
