//! A failover to a standby that lost the last commits, as the leases and elector models share it:
//! the server's timeline, the promotion record beside each table (`sql/schema/promotion.sql`), and
//! the head that `sql/leases/acquire.sql` and `sql/elector/is_leader.sql` share word for word: the
//! `epoch` (the server's timeline, folded into new tokens and terms), the `gate` (the hold-off after
//! a promotion) and the `stale` answer.

/// A time in ticks of the database clock, as in every model.
pub type Tick = i8;

/// A server timeline (1 until the first promotion).
pub type Timeline = u8;

/// What one timeline adds to a token or term: the model's `2^48` (tokens and terms drawn on one
/// timeline stay below it within the models' bounds).
pub const FOLD: u8 = 16;

/// The promotion record (`sql/schema/create_promotion.sql`), or a grant's copy of it (`$7 $8 $9`).
/// Every grant asks for the same TTL, so `longest_ttl` is the TTL and is not kept.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Record {
    /// The timeline it names.
    pub timeline: Timeline,
    /// When a grant first saw that timeline (`None`: as of the table's creation).
    pub seen_at: Option<Tick>,
    /// No lapsed or absent key or leadership is granted before it.
    pub grants_from: Option<Tick>,
}

impl Record {
    /// The record seeded with the table (`sql/schema/seed_promotion.sql`) on timeline 1.
    pub fn seeded() -> Record {
        Record {
            timeline: 1,
            seen_at: None,
            grants_from: None,
        }
    }

    /// `sql/schema/promotion.sql` at `now` on a server on `server`: records a promotion when the
    /// server is on another timeline than the record names (grants wait one longest TTL, `ttl`,
    /// from now); returns the record.
    pub fn read(&mut self, server: Timeline, now: Tick, ttl: Tick) -> Record {
        if server != self.timeline {
            if self.timeline > 0 {
                self.seen_at = Some(now);
                self.grants_from = Some(self.grants_from.map_or(now + ttl, |g| g.max(now + ttl)));
            }
            self.timeline = server;
        }
        *self
    }
}

/// The parameters `$5`..`$9` of a grant (`acquire.sql`, `is_leader.sql`): whether tokens fold in
/// the timeline, whether grants are held off after a promotion, and the record the caller read;
/// and is_leader.sql's `$10`: how much longer than its last holder another member waits for a
/// lapsed leadership after the hold-off (the poller's retry period; 0 for an acquire).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Grant {
    pub fold: bool,
    pub hold_off: bool,
    pub record: Record,
    pub prefer: Tick,
}

impl Grant {
    /// Neither folded nor held off (`$5`, `$6` false), as the models ran before failover was
    /// modelled.
    pub fn plain() -> Grant {
        Grant {
            fold: false,
            hold_off: false,
            record: Record::default(),
            prefer: 0,
        }
    }

    /// The `epoch` block: the server's timeline with `$5`, else 0.
    pub fn epoch(&self, server: Timeline) -> Timeline {
        if self.fold {
            server
        } else {
            0
        }
    }

    /// The `base` block: what every token or term drawn by this statement is above.
    pub fn base(&self, server: Timeline) -> u8 {
        self.epoch(server).saturating_sub(1) * FOLD
    }

    /// The `gate` block at `now` for a grant of `ttl`: a lapsed or absent key or leadership may be
    /// granted.
    pub fn open(&self, server: Timeline, now: Tick, ttl: Tick) -> bool {
        self.open_to(server, now, ttl, true)
    }

    /// is_leader.sql's `opens` block: when the hold-off ends for the last holder (`None` when
    /// nothing is held off, or on another timeline than the record's).
    pub fn opens(&self, server: Timeline, ttl: Tick) -> Option<Tick> {
        if !self.hold_off || self.epoch(server) != self.record.timeline {
            return None;
        }
        let seen = self.record.seen_at.map(|seen| seen + ttl);
        match (self.record.grants_from, seen) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// is_leader.sql's `gate`: for the lapsed leadership's last holder (`last`, or the leadership
    /// is absent) `open`, for another member `open_to_others`, `prefer` later.
    pub fn open_to(&self, server: Timeline, now: Tick, ttl: Tick, last: bool) -> bool {
        let prefer = if last { 0 } else { self.prefer };
        !self.hold_off
            || (self.epoch(server) == self.record.timeline
                && self.opens(server, ttl).is_none_or(|at| at + prefer <= now))
    }

    /// The `stale` answer: the server is on another timeline than the record names.
    pub fn stale(&self, server: Timeline) -> bool {
        self.hold_off && self.epoch(server) != self.record.timeline
    }
}
