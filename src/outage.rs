//! Outages: whether a participant (a campaign, a membership loop) was cut off from the database, and
//! for how long after it reaches the database again it leaves alone what other holders let lapse
//! meanwhile.
//!
//! A database outage or failover longer than the TTL lets every tenure lapse in the database,
//! although every process stayed healthy. When the database is back, the first participant to reach
//! it could take over everything that lapsed; instead, a participant that was cut off waits one
//! retry period after its first answer before it takes over anything another holder let lapse (the
//! holders reach the database within that period and take back their own at once), while a
//! participant that saw no failure (the holder really crashed) takes over at expiry as before.
//! Waiting never breaks safety: it only delays a take-over, and the deferral is measured with a
//! local [`Instant`], which never extends anybody's belief.

use std::time::{Duration, Instant};

use crate::error::Error;

/// What a participant knows of its reach to the database.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Its statements are answered; nothing to defer.
    #[default]
    Reached,
    /// A statement failed for want of the database (a connection error or a timeout): it defers
    /// until one is answered, and one retry period beyond.
    CutOff,
    /// Back from an outage: it defers taking over others' lapsed holdings until then.
    Back(Instant),
}

impl Reach {
    /// A statement failed with `error`: a connection error or a timeout cuts off; any other
    /// (a refused privilege, a serialization failure) says the database answered.
    pub(crate) fn failed(&mut self, error: &Error, now: Instant, period: Duration) {
        if error.is_permanent() || error.is_serialization() {
            self.answered(now, period);
        } else {
            *self = Reach::CutOff;
        }
    }

    /// A statement was answered at `now`: back from an outage, the deferral runs one `period`
    /// from now.
    pub(crate) fn answered(&mut self, now: Instant, period: Duration) {
        if *self == Reach::CutOff {
            *self = Reach::Back(now + period);
        }
    }

    /// Back from an outage found otherwise (its own holding had lapsed, or a statement waited
    /// longer than a retry period for the database): defers one `period` from `now`.
    pub(crate) fn returned(&mut self, now: Instant, period: Duration) {
        let until = now + period;
        *self = match *self {
            Reach::Back(was) if was > until => Reach::Back(was),
            _ => Reach::Back(until),
        };
    }

    /// Until when, at `now`, taking over others' lapsed holdings waits: `Some` while cut off (the
    /// instant `now`: at least until the next answer) or back for less than the deferral.
    pub(crate) fn defers(&mut self, now: Instant) -> Option<Instant> {
        match *self {
            Reach::Reached => None,
            Reach::CutOff => Some(now),
            Reach::Back(until) if until > now => Some(until),
            Reach::Back(_) => {
                *self = Reach::Reached;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const PERIOD: Duration = Duration::from_millis(500);

    #[test]
    fn a_failure_defers_until_one_period_after_the_next_answer() {
        let start = Instant::now();
        let mut reach = Reach::default();
        assert_eq!(reach.defers(start), None);
        let down = Error::new(ErrorKind::Connection, "refused");
        reach.failed(&down, start, PERIOD);
        assert_eq!(reach.defers(start), Some(start));
        let back = start + Duration::from_secs(3);
        reach.answered(back, PERIOD);
        assert_eq!(reach.defers(back), Some(back + PERIOD));
        // Later answers do not move it.
        reach.answered(back + PERIOD / 2, PERIOD);
        assert_eq!(reach.defers(back + PERIOD / 2), Some(back + PERIOD));
        assert_eq!(reach.defers(back + PERIOD), None);
        assert_eq!(reach, Reach::Reached);
    }

    #[test]
    fn an_answered_refusal_is_no_outage() {
        let start = Instant::now();
        let mut reach = Reach::default();
        reach.failed(
            &Error::new(ErrorKind::Database, "permission denied"),
            start,
            PERIOD,
        );
        assert_eq!(reach.defers(start), None);
    }

    #[test]
    fn a_lapse_found_defers_one_period_and_never_shortens_a_deferral() {
        let start = Instant::now();
        let mut reach = Reach::default();
        reach.returned(start, PERIOD * 4);
        reach.returned(start, PERIOD);
        assert_eq!(reach.defers(start), Some(start + PERIOD * 4));
    }
}
