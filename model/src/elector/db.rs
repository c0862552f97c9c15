//! The leader table (one fleet), its term sequence, and the statements of `sql/elector/` as step
//! functions, one statement each.

use super::{Holder, Term, Tick};
use crate::failover::{Grant, Record, Timeline};

/// The fleet's row (`elected_at` is not modelled: no decision reads it).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    pub holder: Holder,
    pub term: Term,
    pub expires_at: Tick,
    pub resign_requested: bool,
}

impl Row {
    /// is_leader.sql's `prefer`: whether `holder`, whose newest term won is `last` (`$11`), is the
    /// row's last holder: named by it, or having won a term above its (one an asynchronous
    /// standby never received).
    pub fn last(&self, holder: Holder, last: Option<Term>) -> bool {
        self.holder == holder || last.is_some_and(|term| term > self.term)
    }

    /// is_leader.sql's answer to anyone else's poll while this row's leader is live.
    fn observed(&self) -> PollAnswer {
        PollAnswer {
            leader: Some((self.holder, self.term, self.expires_at)),
            mine: false,
            ended: false,
            my_term: Some(self.term),
            stale: false,
            held_off: None,
        }
    }
}

/// The table (one fleet), its term sequence, its promotion record and the server's timeline.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    pub row: Option<Row>,
    /// The value the sequence's next `nextval` returns.
    pub seq: Term,
    /// The promotion record (`<table>_promotion`).
    pub record: Record,
    /// The server's timeline.
    pub timeline: Timeline,
}

/// What is_leader.sql answers (its one row, or `Default` when it answers none).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct PollAnswer {
    /// `holder`, `term`, `expires_at`: the leader this statement saw (`None` after an ended tenure).
    pub leader: Option<(Holder, Term, Tick)>,
    /// This holder leads now under `my_term`.
    pub mine: bool,
    /// This holder was asked to step down: `my_term` waits to be resigned.
    pub ended: bool,
    pub my_term: Option<Term>,
    /// The server is on another timeline than the record the poll was sent with.
    pub stale: bool,
    /// `held_off_us`: nobody leads, and only the hold-off kept this poll from winning: it opens for
    /// this holder in that many ticks.
    pub held_off: Option<Tick>,
}

/// Known holes, reintroduced one at a time to show the checker finds them. `None` in the real
/// model and always in the differential test.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hole {
    /// is_leader.sql ends the tenure inside the renewal when a resignation was requested
    /// (`expires_at = now()`), so the leader learns of it only from the answer, which may come late
    /// or never, while the row is free for anyone's next poll.
    RenewalEndsOnRequest,
    /// The client forgets the term it stood down from when it sends the resignation, not when the
    /// resignation is acknowledged: a lost answer leaves nothing to send again.
    ResignForgetsFirst,
    /// is_leader.sql drawing new terms without the timeline's `base`: a promoted standby whose
    /// sequence went back hands out terms again.
    NoTimelineFold,
    /// is_leader.sql with `$6` false: no hold-off after a promotion.
    NoHoldOff,
    /// fence.sql without `FOR SHARE`: a new election does not wait for the fenced transaction.
    FenceWithoutLock,
}

impl Default for Db {
    fn default() -> Db {
        Db::new()
    }
}

impl Db {
    /// An empty table on timeline 1, its sequence at 1, its promotion record as seeded.
    pub fn new() -> Db {
        Db {
            row: None,
            seq: 1,
            record: Record::seeded(),
            timeline: 1,
        }
    }

    fn next_term(&mut self) -> Term {
        let term = self.seq;
        self.seq += 1;
        term
    }

    /// is_leader.sql at `now` for `holder` guarded by `guard` (`$4`) whose newest term won is
    /// `last` (`$11`), with `grant` its `$5`..`$10` (the timeline folded into new terms, the
    /// hold-off gate, the record the caller read, the preference).
    pub fn is_leader(
        &mut self,
        now: Tick,
        holder: Holder,
        ttl: Tick,
        (guard, last): (Option<Term>, Option<Term>),
        grant: &Grant,
        hole: Option<Hole>,
    ) -> PollAnswer {
        let stale = grant.stale(self.timeline);
        let preferred = self.row.as_ref().is_none_or(|row| row.last(holder, last));
        let answer = self.poll(now, holder, ttl, (guard, last), grant, hole);
        let nobody = answer.leader.is_none() && !answer.mine && !answer.ended && !stale;
        let held_off = (grant.opens(self.timeline, ttl))
            .map(|at| at + if preferred { 0 } else { grant.prefer } - now)
            .filter(|wait| nobody && *wait > 0);
        PollAnswer {
            stale,
            held_off,
            ..answer
        }
    }

    /// is_leader.sql's `created`: the first tenure of the fleet, until `expires_at`.
    fn create(&mut self, expires_at: Tick, holder: Holder, base: Term) -> PollAnswer {
        let term = base + self.next_term();
        self.row = Some(Row {
            holder,
            term,
            expires_at,
            resign_requested: false,
        });
        PollAnswer {
            leader: Some((holder, term, expires_at)),
            mine: true,
            ended: false,
            my_term: Some(term),
            stale: false,
            held_off: None,
        }
    }

    /// is_leader.sql's outcome but for `stale`.
    fn poll(
        &mut self,
        now: Tick,
        holder: Holder,
        ttl: Tick,
        (guard, last): (Option<Term>, Option<Term>),
        grant: &Grant,
        hole: Option<Hole>,
    ) -> PollAnswer {
        let open = grant.open(self.timeline, now, ttl);
        let base = if hole == Some(Hole::NoTimelineFold) {
            0
        } else {
            grant.base(self.timeline)
        };
        let Some(row) = self.row.clone() else {
            if !open {
                return PollAnswer::default();
            }
            return self.create(now + ttl, holder, base);
        };
        let live = row.expires_at > now;
        let same = row.holder == holder && guard == Some(row.term) && live;
        if live && !same {
            // Anyone else's poll while a leader is live: no write; the live leader is the answer.
            return row.observed();
        }
        if !live && !grant.open_to(self.timeline, now, ttl, row.last(holder, last)) {
            return PollAnswer::default();
        }
        // `taken`: a renewal (`same`) or a new tenure of an expired row.
        let term = if same {
            row.term
        } else {
            let next = base + self.next_term();
            (row.term + 1).max(next)
        };
        let asked = same && row.resign_requested;
        let expires_at = if asked {
            if hole == Some(Hole::RenewalEndsOnRequest) {
                now
            } else {
                row.expires_at
            }
        } else if live {
            row.expires_at.max(now + ttl)
        } else {
            now + ttl
        };
        let resign_requested = asked && hole != Some(Hole::RenewalEndsOnRequest);
        self.row = Some(Row {
            holder,
            term,
            expires_at,
            resign_requested,
        });
        if asked {
            PollAnswer {
                leader: None,
                mine: false,
                ended: true,
                my_term: Some(term),
                stale: false,
                held_off: None,
            }
        } else {
            PollAnswer {
                leader: Some((holder, term, expires_at)),
                mine: true,
                ended: false,
                my_term: Some(term),
                stale: false,
                held_off: None,
            }
        }
    }

    /// resign.sql: whether it ended `holder`'s live tenure `term`.
    pub fn resign(&mut self, now: Tick, holder: Holder, term: Term) -> bool {
        match self.row.as_mut() {
            Some(row) if row.holder == holder && row.term == term && row.expires_at > now => {
                row.expires_at = now;
                true
            }
            _ => false,
        }
    }

    /// request_resign.sql: the live leader asked (holder and term), if any.
    pub fn request_resign(&mut self, now: Tick) -> Option<(Holder, Term)> {
        let row = self.row.as_mut().filter(|row| row.expires_at > now)?;
        row.resign_requested = true;
        Some((row.holder, row.term))
    }

    /// fence.sql at `clock` (its `clock_timestamp()`): whether it admits `holder`'s tenure `term`.
    pub fn fence(&self, clock: Tick, holder: Holder, term: Term) -> bool {
        self.row
            .as_ref()
            .is_some_and(|row| row.holder == holder && row.term == term && row.expires_at > clock)
    }
}
