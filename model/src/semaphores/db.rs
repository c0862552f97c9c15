//! The table (one key, one row per slot), its token sequence, and the statements a permit sends as
//! step functions: `sql/semaphores/acquire.sql` and the lease statements it renews, fences and
//! releases with (`sql/leases/renew_tenure.sql`, `fence.sql`, `release.sql`, the sweep of
//! `release_and_sweep.sql`).

use super::{Owner, Slot, Tick, Token};

/// A slot's row.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    pub owner: Owner,
    pub token: Token,
    pub held_until: Tick,
}

/// The table (one key) and its token sequence.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Db {
    /// The rows by slot (`None`: no row for that slot).
    pub rows: Vec<Option<Row>>,
    /// The value the sequence's next `nextval` returns.
    pub seq: Token,
}

/// Known holes, reintroduced one at a time to show the checker finds them. `None` in the real
/// model and always in the differential test.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Hole {
    /// acquire.sql with its slot bound off by one (`slot <= $4`, `generate_series(0, $4)`): one
    /// more slot than the permits asked.
    SlotBoundOffByOne,
    /// acquire.sql's `free` without `FOR UPDATE SKIP LOCKED`: a lapsed slot is chosen from the
    /// statement's snapshot and the update, once it has the row's lock, re-checks only key and
    /// slot, so two acquirers can take one slot.
    NoSkipLocked,
}

/// What the first part of an acquire did: all of it but an insert of a missing slot (whose
/// conflict with a concurrent insert is what makes an answer "contended"), or, with
/// [`Hole::NoSkipLocked`], an update of a slot chosen from the snapshot.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pending {
    /// Granted by the update of a lapsed slot: `(slot, token)`.
    Taken(Slot, Token),
    /// Nothing free: refused.
    Refused,
    /// The lowest missing slot, to insert.
    Insert(Slot),
    /// [`Hole::NoSkipLocked`]: the lapsed slot the snapshot showed, to update.
    Take(Slot),
}

/// An acquire's answer: `(slot, token)` when granted, and whether it says contended.
pub type Acquired = (Option<(Slot, Token)>, bool);

impl Db {
    /// No row, the sequence at 1, room for `slots` slots.
    pub fn empty(slots: usize) -> Db {
        Db {
            rows: vec![None; slots],
            seq: 1,
        }
    }

    fn next_token(&mut self) -> Token {
        let token = self.seq;
        self.seq += 1;
        token
    }

    /// The slot `owner`'s tenure `token` is in, if a row carries it.
    pub fn slot_of(&self, owner: Owner, token: Token) -> Option<Slot> {
        let slot = self.rows.iter().position(|row| {
            row.as_ref()
                .is_some_and(|row| row.owner == owner && row.token == token)
        })?;
        Some(slot as Slot)
    }

    /// The rows live at `now`.
    pub fn live(&self, now: Tick) -> usize {
        self.rows
            .iter()
            .flatten()
            .filter(|row| row.held_until > now)
            .count()
    }

    /// acquire.sql up to its insert (`$5`, `$6` false), with `now()` = `now`, asking for `permits`:
    /// the lowest lapsed slot below `permits` not `locked` (by a fence's `FOR SHARE`; `SKIP
    /// LOCKED` passes it over) is taken, else the lowest missing slot is to be inserted, else
    /// refused.
    pub fn acquire_begin(
        &mut self,
        now: Tick,
        owner: Owner,
        ttl: Tick,
        permits: Slot,
        locked: &[Slot],
        hole: Option<Hole>,
    ) -> Pending {
        let bound = if hole == Some(Hole::SlotBoundOffByOne) {
            permits + 1
        } else {
            permits
        };
        let slots = (bound as usize).min(self.rows.len());
        let free = (0..slots).find(|&s| {
            self.rows[s]
                .as_ref()
                .is_some_and(|row| row.held_until <= now)
                && (hole == Some(Hole::NoSkipLocked) || !locked.contains(&(s as Slot)))
        });
        if let Some(s) = free {
            if hole == Some(Hole::NoSkipLocked) {
                return Pending::Take(s as Slot);
            }
            return self.take(now, owner, ttl, s as Slot);
        }
        match (0..slots).find(|&s| self.rows[s].is_none()) {
            Some(s) => Pending::Insert(s as Slot),
            None => Pending::Refused,
        }
    }

    /// The update of `slot` (the `taken` part): a new tenure with a new token.
    fn take(&mut self, now: Tick, owner: Owner, ttl: Tick, slot: Slot) -> Pending {
        let next = self.next_token();
        let Some(row) = self.rows[slot as usize].as_mut() else {
            return Pending::Refused;
        };
        row.token = (row.token + 1).max(next);
        row.owner = owner;
        row.held_until = now + ttl;
        Pending::Taken(slot, row.token)
    }

    /// The rest of an acquire begun with `pending`: the insert of a missing slot (a sequence value
    /// drawn whether or not it conflicts; a conflict answers contended), or with
    /// [`Hole::NoSkipLocked`] the update of the slot the snapshot showed.
    pub fn acquire_end(
        &mut self,
        now: Tick,
        owner: Owner,
        ttl: Tick,
        pending: Pending,
    ) -> Acquired {
        match pending {
            Pending::Taken(slot, token) => (Some((slot, token)), false),
            Pending::Refused => (None, false),
            Pending::Insert(slot) => {
                let token = self.next_token();
                let row = &mut self.rows[slot as usize];
                if row.is_some() {
                    return (None, true);
                }
                *row = Some(Row {
                    owner,
                    token,
                    held_until: now + ttl,
                });
                (Some((slot, token)), false)
            }
            Pending::Take(slot) => match self.take(now, owner, ttl, slot) {
                Pending::Taken(slot, token) => (Some((slot, token)), false),
                _ => (None, false),
            },
        }
    }

    /// acquire.sql executed alone (nothing between its two parts, nothing locked).
    pub fn acquire(&mut self, now: Tick, owner: Owner, ttl: Tick, permits: Slot) -> Acquired {
        let pending = self.acquire_begin(now, owner, ttl, permits, &[], None);
        self.acquire_end(now, owner, ttl, pending)
    }

    /// renew_tenure.sql (`$5` null): whether it renewed.
    pub fn renew_tenure(&mut self, now: Tick, owner: Owner, token: Token, ttl: Tick) -> bool {
        let Some(slot) = self.slot_of(owner, token) else {
            return false;
        };
        let Some(row) = self.rows[slot as usize].as_mut() else {
            return false;
        };
        if row.held_until <= now {
            return false;
        }
        row.held_until = row.held_until.max(now + ttl);
        true
    }

    /// release.sql with the permit's token: whether it released.
    pub fn release(&mut self, now: Tick, owner: Owner, token: Token) -> bool {
        let Some(slot) = self.slot_of(owner, token) else {
            return false;
        };
        match self.rows[slot as usize].as_mut() {
            Some(row) if row.held_until > now => {
                row.held_until = now;
                true
            }
            _ => false,
        }
    }

    /// fence.sql at `clock` (its `clock_timestamp()`): the slot whose tenure it admits.
    pub fn fence(&self, clock: Tick, owner: Owner, token: Token) -> Option<Slot> {
        let slot = self.slot_of(owner, token)?;
        let live = self.rows[slot as usize]
            .as_ref()
            .is_some_and(|row| row.held_until > clock);
        live.then_some(slot)
    }

    /// release_and_sweep.sql's sweep of one lapsed row (modelled as lapsed at all, which only
    /// allows more deletes than "over an hour ago").
    pub fn sweep(&mut self, now: Tick, slot: Slot) -> bool {
        let row = &mut self.rows[slot as usize];
        if row.as_ref().is_some_and(|row| row.held_until < now) {
            *row = None;
            return true;
        }
        false
    }
}
