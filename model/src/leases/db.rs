//! The table (one key), its token sequence, and the statements of `sql/leases/` as step
//! functions, one statement each.

use super::{Owner, Tick, Token};
use crate::failover::{Grant, Record, Timeline};

/// The key's row.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    pub owner: Owner,
    pub token: Token,
    pub held_until: Tick,
    pub managed_token: Option<Token>,
    pub superseded: bool,
}

/// The table (one key), its token sequence, its promotion record and the server's timeline.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    pub row: Option<Row>,
    /// The value the sequence's next `nextval` returns.
    pub seq: Token,
    /// The promotion record (`<table>_promotion`).
    pub record: Record,
    /// The server's timeline.
    pub timeline: Timeline,
}

/// What acquire.sql answers: the granted token and its `superseded` (`None` when refused), and
/// whether the server is on another timeline than the record the grant was sent with.
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub struct Acquired {
    pub granted: Option<(Token, bool)>,
    pub stale: bool,
}

/// Known holes, reintroduced one at a time to show the checker finds them. `None` in the real
/// model and always in the differential test.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hole {
    /// renew_tenure.sql as `held_until = now() + ttl` (without `greatest`): a renewal that may
    /// shorten an expiry.
    RenewalMayShorten,
    /// The holder records its local instant when the answer arrives instead of before sending.
    DeadlineAfterAnswer,
    /// fence.sql without `FOR SHARE`: a takeover does not wait for the fencing transaction.
    FenceWithoutShareLock,
    /// acquire.sql without the `managed_token` guard: a raw grant of the same owner name adopts a
    /// managed lease's tenure.
    RawAdoptsManaged,
    /// acquire.sql and force_release.sql drawing new tokens without the timeline's `base`: a
    /// promoted standby whose sequence went back hands out tokens again.
    NoTimelineFold,
    /// acquire.sql with `$6` false: no hold-off after a promotion.
    NoHoldOff,
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

    fn next_token(&mut self) -> Token {
        let token = self.seq;
        self.seq += 1;
        token
    }

    /// acquire.sql: `raw` is `$4`, `grant` `$5`..`$9` (the timeline folded into new tokens, the
    /// hold-off gate, the record the caller read).
    pub fn acquire(
        &mut self,
        now: Tick,
        owner: Owner,
        ttl: Tick,
        raw: bool,
        grant: &Grant,
        hole: Option<Hole>,
    ) -> Acquired {
        let stale = grant.stale(self.timeline);
        let granted = self.take(now, owner, ttl, raw, grant, hole);
        Acquired { granted, stale }
    }

    /// acquire.sql's `taken` and `created`: the token granted and its `superseded`, or `None`.
    fn take(
        &mut self,
        now: Tick,
        owner: Owner,
        ttl: Tick,
        raw: bool,
        grant: &Grant,
        hole: Option<Hole>,
    ) -> Option<(Token, bool)> {
        let open = grant.open(self.timeline, now, ttl);
        let base = if hole == Some(Hole::NoTimelineFold) {
            0
        } else {
            grant.base(self.timeline)
        };
        match self.row.clone() {
            None => {
                if !open {
                    return None;
                }
                let token = base + self.next_token();
                self.row = Some(Row {
                    owner,
                    token,
                    held_until: now + ttl,
                    managed_token: if raw { None } else { Some(token) },
                    superseded: false,
                });
                Some((token, false))
            }
            Some(row) => {
                let live = row.held_until > now;
                let unmarked =
                    hole == Some(Hole::RawAdoptsManaged) || row.managed_token != Some(row.token);
                let same = raw && row.owner == owner && live;
                if !((!live && open) || (same && unmarked)) {
                    return None;
                }
                let token = if same {
                    row.token
                } else {
                    let next = base + self.next_token();
                    (row.token + 1).max(next)
                };
                let held_until = if live {
                    row.held_until.max(now + ttl)
                } else {
                    now + ttl
                };
                let superseded = row.owner == owner && live && row.superseded;
                self.row = Some(Row {
                    owner,
                    token,
                    held_until,
                    managed_token: if raw { None } else { Some(token) },
                    superseded,
                });
                Some((token, superseded))
            }
        }
    }

    /// renew_tenure.sql (`$5` null): `Some(superseded)` when renewed, `None` when the tenure is
    /// not this one's any more.
    pub fn renew_tenure(
        &mut self,
        now: Tick,
        owner: Owner,
        token: Token,
        ttl: Tick,
        hole: Option<Hole>,
    ) -> Option<bool> {
        let row = self.row.as_mut()?;
        if row.owner != owner || row.token != token || row.held_until <= now {
            return None;
        }
        row.held_until = if hole == Some(Hole::RenewalMayShorten) {
            now + ttl
        } else {
            row.held_until.max(now + ttl)
        };
        Some(row.superseded)
    }

    /// renew.sql for a batch of this one key: `Some((token, superseded))` when renewed.
    pub fn renew(&mut self, now: Tick, owner: Owner, ttl: Tick) -> Option<(Token, bool)> {
        let row = self.row.as_mut()?;
        if row.owner != owner || row.held_until <= now || row.managed_token == Some(row.token) {
            return None;
        }
        row.held_until = row.held_until.max(now + ttl);
        Some((row.token, row.superseded))
    }

    /// release.sql (and release_and_sweep.sql's release): whether it released.
    pub fn release(&mut self, now: Tick, owner: Owner, token: Option<Token>) -> bool {
        let Some(row) = self.row.as_mut() else {
            return false;
        };
        let guard = match token {
            None => row.managed_token != Some(row.token),
            Some(token) => row.token == token,
        };
        if row.owner != owner || !guard || row.held_until <= now {
            return false;
        }
        row.held_until = now;
        true
    }

    /// supersede.sql: whether the live lease is (now) flagged.
    pub fn supersede(&mut self, now: Tick) -> bool {
        match self.row.as_mut() {
            Some(row) if row.held_until > now => {
                row.superseded = true;
                true
            }
            _ => false,
        }
    }

    /// force_release.sql, folding the timeline into the new token with `fold` (`$2`): the owner
    /// whose live tenure it ended.
    pub fn force_release(&mut self, now: Tick, fold: bool) -> Option<Owner> {
        let live = self.row.as_ref().is_some_and(|row| row.held_until > now);
        if !live {
            return None;
        }
        let base = Grant {
            fold,
            ..Grant::plain()
        }
        .base(self.timeline);
        let next = base + self.next_token();
        let row = self.row.as_mut()?;
        row.held_until = now;
        row.token = (row.token + 1).max(next);
        row.superseded = false;
        Some(row.owner)
    }

    /// fence.sql at `clock` (its `clock_timestamp()`): whether it admits the tenure.
    pub fn fence(&self, clock: Tick, owner: Owner, token: Token) -> bool {
        self.row
            .as_ref()
            .is_some_and(|row| row.owner == owner && row.token == token && row.held_until > clock)
    }

    /// release_and_sweep.sql's sweep, for a row that lapsed (modelled as lapsed at all, which only
    /// allows more deletes than "over an hour ago").
    pub fn sweep(&mut self, now: Tick) -> bool {
        if self.row.as_ref().is_some_and(|row| row.held_until < now) {
            self.row = None;
            return true;
        }
        false
    }
}
