//! The tick-claims table (one job's row) and the statements of `sql/tick_claims/` as step
//! functions, one statement each.

use super::{ClaimId, Owner, Tick, Token};

/// The job's row.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    /// The last tick claimed (its due time, in ticks of the database clock).
    pub tick: Tick,
    /// `None` once released.
    pub busy_until: Option<Tick>,
    pub owner: Owner,
    pub token: Token,
    pub claim_id: ClaimId,
}

/// The table (one job). Tokens are the row's own counter (`greatest(token + 1, epoch + 1)`, the
/// epoch 0: no timeline folding).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Db {
    pub row: Option<Row>,
}

/// Known holes, reintroduced one at a time to show the checker finds them. `None` in the real
/// model and always in the differential test.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hole {
    /// claim.sql without `tick <= now() + lead` (`too_far` never true): a scheduler whose host
    /// clock stepped ahead claims a tick that is not yet due.
    NoDueGuard,
    /// claim.sql without the busy guard (`busy_until IS NULL OR busy_until <= now()`): a later tick
    /// is claimed while a run of the job goes on.
    NoBusyGuard,
    /// claim.sql's `already` matching by owner instead of claim id: a restarted instance (same
    /// owner name) claiming a tick its earlier incarnation won finds that win and runs it again.
    AlreadyByOwner,
    /// extend.sql as `busy_until = now() + busy` (without `greatest`): an extension whose
    /// transaction began before a later one's commits after it and shortens the busy period.
    ExtendMayShorten,
}

/// A claim's parameters as claim.sql binds them (`$1`..`$7` but the job's id and `$6`).
#[derive(Clone, Copy, Debug)]
pub struct Claim {
    /// `$2`: the tick claimed.
    pub tick: Tick,
    /// `$3`: the busy period, in ticks.
    pub busy: Tick,
    /// `$4`.
    pub owner: Owner,
    /// `$5`: finds its own win when the claim is sent again.
    pub claim_id: ClaimId,
    /// `$7`: how far ahead of `now()` the tick may be, in ticks.
    pub lead: Tick,
}

/// What claim.sql answers: `too_far`, and the token when won (or found won by this claim id).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Claimed {
    pub too_far: bool,
    pub token: Option<Token>,
}

impl Db {
    fn busy(&self, now: Tick, owner: Owner, token: Token) -> Option<&Row> {
        self.row.as_ref().filter(|row| {
            row.owner == owner && row.token == token && row.busy_until.is_some_and(|b| b > now)
        })
    }

    /// claim.sql (`$6` false) at `now()` = `now`, with `claim`'s parameters.
    pub fn claim(&mut self, now: Tick, claim: Claim, hole: Option<Hole>) -> Claimed {
        let Claim {
            tick,
            busy,
            owner,
            claim_id,
            lead,
        } = claim;
        let too_far = hole != Some(Hole::NoDueGuard) && tick > now + lead;
        if too_far {
            return Claimed {
                too_far,
                token: None,
            };
        }
        let fresh = |token: Token| Row {
            tick,
            busy_until: Some(now + busy),
            owner,
            token,
            claim_id,
        };
        let Some(row) = self.row.clone() else {
            self.row = Some(fresh(1));
            return Claimed {
                too_far,
                token: Some(1),
            };
        };
        let free = hole == Some(Hole::NoBusyGuard) || row.busy_until.is_none_or(|b| b <= now);
        if row.tick < tick && free {
            let token = (row.token + 1).max(1);
            self.row = Some(fresh(token));
            return Claimed {
                too_far,
                token: Some(token),
            };
        }
        // `already`: the snapshot's row, unchanged here (nothing was taken).
        let mine = if hole == Some(Hole::AlreadyByOwner) {
            row.owner == owner
        } else {
            row.claim_id == claim_id
        };
        Claimed {
            too_far,
            token: (row.tick == tick && mine).then_some(row.token),
        }
    }

    /// extend.sql: whether it kept the claim busy (until at least `now + busy`).
    pub fn extend(&mut self, now: Tick, owner: Owner, token: Token, busy: Tick) -> bool {
        if self.busy(now, owner, token).is_none() {
            return false;
        }
        let row = self.row.as_mut().expect("busy");
        row.busy_until = row.busy_until.map(|b| b.max(now + busy));
        true
    }

    /// release.sql: whether it ended the busy period.
    pub fn release(&mut self, now: Tick, owner: Owner, token: Token) -> bool {
        if self.busy(now, owner, token).is_none() {
            return false;
        }
        self.row.as_mut().expect("busy").busy_until = None;
        true
    }

    /// fence.sql at `clock` (its `clock_timestamp()`): whether it admits the claim.
    pub fn fence(&self, clock: Tick, owner: Owner, token: Token) -> bool {
        self.busy(clock, owner, token).is_some()
    }
}
