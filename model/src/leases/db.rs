//! The table (one key), its token sequence, and the statements of `sql/leases/` as step
//! functions, one statement each.

use super::{Owner, Tick, Token};

/// The key's row.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    pub owner: Owner,
    pub token: Token,
    pub held_until: Tick,
    pub managed_token: Option<Token>,
    pub superseded: bool,
}

/// The table (one key) and its token sequence.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    pub row: Option<Row>,
    /// The value the sequence's next `nextval` returns.
    pub seq: Token,
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
}

impl Db {
    fn next_token(&mut self) -> Token {
        let token = self.seq;
        self.seq += 1;
        token
    }

    /// acquire.sql (`$5`, `$6` false: no timeline epoch, no promotion gate). `raw` is `$4`.
    /// Returns the granted token and its `superseded`, or `None` when refused.
    pub fn acquire(
        &mut self,
        now: Tick,
        owner: Owner,
        ttl: Tick,
        raw: bool,
        hole: Option<Hole>,
    ) -> Option<(Token, bool)> {
        match self.row.clone() {
            None => {
                let token = self.next_token();
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
                if !(!live || (same && unmarked)) {
                    return None;
                }
                let token = if same {
                    row.token
                } else {
                    let next = self.next_token();
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

    /// force_release.sql (`$2` false): the owner whose live tenure it ended.
    pub fn force_release(&mut self, now: Tick) -> Option<Owner> {
        let live = self.row.as_ref().is_some_and(|row| row.held_until > now);
        if !live {
            return None;
        }
        let next = self.next_token();
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
