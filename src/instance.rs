//! Who an instance is: the owner name written into claim and lease rows.
//!
//! The default is `"{hostname}-{pid}-{random hex}"`. Hostname alone repeats across replicas of a
//! container image and pid alone repeats across containers (both caused double runs in peers:
//! ShedLock #317, oban-py #32), so a random part makes every process, and every handle, distinct.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

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
}
