//! What raw acquires and batch renewals return.

use std::time::Instant;

/// A raw grant from [`Leases::try_acquire`](super::Leases::try_acquire): no thread renews it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub(super) key: String,
    pub(super) token: i64,
    pub(super) superseded: bool,
    pub(super) deadline: Instant,
}

impl Grant {
    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The tenure's fencing token.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// Whether a contender has asked for the key (only on a re-acquire inside a flagged tenure).
    pub fn is_superseded(&self) -> bool {
        self.superseded
    }

    /// The local deadline: the instant before the grant was sent, plus the TTL.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// One key's outcome in a [`Renewal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRenewal {
    /// Renewed.
    Held {
        /// The tenure's token.
        token: i64,
    },
    /// Renewed, but a contender asked for it: stop and release.
    Superseded {
        /// The tenure's token.
        token: i64,
    },
    /// Not renewed: taken, released, deleted or lapsed.
    Lost,
}

/// The outcome of a batch [`Leases::renew`](super::Leases::renew), one entry per distinct key, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    pub(super) outcomes: Vec<(String, KeyRenewal)>,
    pub(super) deadline: Option<Instant>,
}

impl Renewal {
    /// The outcome for `key`, if it was in the batch.
    pub fn get(&self, key: &str) -> Option<KeyRenewal> {
        self.outcomes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, o)| *o)
    }

    /// Every key with its outcome.
    pub fn iter(&self) -> impl Iterator<Item = (&str, KeyRenewal)> + '_ {
        self.outcomes.iter().map(|(k, o)| (k.as_str(), *o))
    }

    /// The keys still held (superseded ones included: they are still held).
    pub fn held(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| *o != KeyRenewal::Lost)
            .map(|(k, _)| k)
    }

    /// The keys held but asked for by a contender.
    pub fn superseded(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| matches!(o, KeyRenewal::Superseded { .. }))
            .map(|(k, _)| k)
    }

    /// The keys lost.
    pub fn lost(&self) -> impl Iterator<Item = &str> + '_ {
        self.iter()
            .filter(|(_, o)| *o == KeyRenewal::Lost)
            .map(|(k, _)| k)
    }

    /// The new local deadline of the renewed keys (the instant before the renewal was sent, plus the
    /// TTL); `None` for an empty batch.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_reports_each_key() {
        let r = Renewal {
            outcomes: vec![
                ("a".into(), KeyRenewal::Held { token: 1 }),
                ("b".into(), KeyRenewal::Superseded { token: 2 }),
                ("c".into(), KeyRenewal::Lost),
            ],
            deadline: None,
        };
        assert_eq!(r.held().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(r.superseded().collect::<Vec<_>>(), ["b"]);
        assert_eq!(r.lost().collect::<Vec<_>>(), ["c"]);
        assert_eq!(r.get("b"), Some(KeyRenewal::Superseded { token: 2 }));
        assert_eq!(r.get("z"), None);
    }
}
