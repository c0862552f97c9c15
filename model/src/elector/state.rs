//! The state the checker explores: the members, the statements in flight and their answers, and
//! the steps between states.

use super::db::{Db, PollAnswer, Row};
use super::{Holder, Term, Tick};
use crate::failover::{Record, Timeline};

/// A statement as it is sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    /// is_leader.sql, guarded by the term the member holds (`$4`), if any.
    Poll { guard: Option<Term> },
    /// resign.sql for the term the member stood down from.
    Resign { term: Term },
    /// request_resign.sql, by an operator or any member (its answer changes nothing).
    RequestResign,
    /// promotion.sql: the promotion record read (and a promotion recorded) before a poll.
    ReadRecord,
    /// fence.sql inside the user's transaction, for the term `Leadership::fence` leads with.
    Fence { term: Term },
    /// leader.sql: who leads now (a live row), read by a campaign back from an outage that only
    /// observes (`Campaign::defers`); it takes nothing.
    Observe,
}

/// A statement in flight: sent (its transaction started at `now`), not executed yet.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Msg {
    /// The member waiting for its answer; `None` once nobody does (it gave up, was killed, or the
    /// statement is an operator's).
    pub member: Option<usize>,
    /// Sent by a clone of the member's elector (on another thread), not its campaign.
    pub clone: bool,
    pub holder: Holder,
    pub op: Op,
    pub now: Tick,
    /// The promotion record a poll is sent with (`$7 $8 $9`).
    pub record: Record,
    /// The newest term the member won, sent with a poll (`$11`).
    pub last: Option<Term>,
}

/// An answer on its way back to member `member` (its clone's thread with `clone`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Answer {
    Poll {
        member: usize,
        clone: bool,
        answer: PollAnswer,
        /// The timeline of the server that executed it.
        timeline: Timeline,
    },
    Resign {
        member: usize,
        clone: bool,
    },
    Record {
        member: usize,
        record: Record,
    },
    /// leader.sql's answer: whether the live leader it read is the member's own holder name.
    Observe {
        member: usize,
        leads: bool,
    },
}

impl Answer {
    /// The member and thread it goes back to.
    pub(super) fn to(&self) -> (usize, bool) {
        match *self {
            Answer::Poll { member, clone, .. } | Answer::Resign { member, clone } => {
                (member, clone)
            }
            Answer::Record { member, .. } | Answer::Observe { member, .. } => (member, false),
        }
    }
}

/// The statement a member's campaign thread waits on.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Wait {
    pub op: Op,
    /// The local instant recorded before sending (a poll's deadline is this plus the TTL).
    pub sent: Tick,
    /// The member stood down while it was in flight (`KnownTenure::resigned` moved on): its answer
    /// is not led on.
    pub stood_down: bool,
}

/// What a campaign knows of its reach to the database (`outage::Reach`), in ticks.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Reach {
    /// Its statements are answered: nothing to defer.
    Reached,
    /// A poll (or a read of who leads) failed for want of the database ([`Action::GiveUp`]): it
    /// only observes until one is answered, and one retry period beyond.
    CutOff,
    /// Back from an outage: it only observes until this tick (one retry period after the first
    /// answer), unless the leader it last saw was itself.
    Back(Tick),
}

/// A campaigning member: the elector's `KnownTenure` and the campaign's state.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Member {
    pub holder: Holder,
    /// The term it won and has not seen end (its polls are guarded by it).
    pub term: Option<Term>,
    /// The newest term it won, kept after the tenure ended (`KnownTenure::last`).
    pub last: Option<Term>,
    /// Its local deadline by the last poll that won or renewed.
    pub deadline: Option<Tick>,
    /// A term it stood down from (or was asked to) that waits to be resigned.
    pub resigning: Option<Term>,
    /// The term told `Elected` and not yet `Lost`.
    pub announced: Option<Term>,
    pub waiting: Option<Wait>,
    /// `Leadership::stop` was called: it only finishes its statement and resigns.
    pub stopped: bool,
    /// Bookkeeping for the properties: the last term it stood down from.
    pub stood_down: Option<Term>,
    /// The promotion record as its `Db` last read it (`None`: to be read before the next poll).
    pub record: Option<Record>,
    /// The timeline of the server whose answer set the deadline: a belief from before a failover
    /// may outlast what the promoted standby received (the hold-off is what protects then).
    pub timeline: Timeline,
    /// The statement a clone of its elector (`Elector::clone`, sharing the tenure) waits on.
    pub clone: Option<Wait>,
    /// The user's fenced transaction (`Leadership::fence`, on a thread of its own) for a term:
    /// its fence sent (`false`) or admitted (`true`: its FOR SHARE lock held until it commits).
    pub fence: Option<(Term, bool)>,
    /// Its reach to the database (the outage rule; always `Reached` with it off).
    pub reach: Reach,
    /// The leader its last answered poll or read saw was its own holder name (the campaign's
    /// `observed`): back from an outage it does not defer.
    pub led: bool,
}

impl Member {
    pub(super) fn new(holder: Holder) -> Member {
        Member {
            holder,
            term: None,
            last: None,
            deadline: None,
            resigning: None,
            announced: None,
            waiting: None,
            stopped: false,
            stood_down: None,
            record: Some(Record::seeded()),
            timeline: 1,
            clone: None,
            fence: None,
            reach: Reach::Reached,
            led: false,
        }
    }

    /// `Campaign::defers`: back from an outage (or still cut off) and not the leader it last saw,
    /// its campaign only observes at `now`.
    pub fn defers(&self, now: Tick) -> bool {
        !self.led
            && match self.reach {
                Reach::Reached => false,
                Reach::CutOff => true,
                Reach::Back(until) => now < until,
            }
    }

    /// `Elector::term`: the term while its local deadline has not passed.
    pub fn elector_term(&self, now: Tick) -> Option<Term> {
        self.term
            .filter(|_| self.deadline.is_some_and(|deadline| now < deadline))
    }

    /// `Leadership::is_leading` (`term`): announced and not lost, and live by the local deadline.
    pub fn leading(&self, now: Tick) -> Option<Term> {
        self.announced
            .filter(|&term| self.elector_term(now) == Some(term))
    }
}

/// The whole system: the database clock, the table, the members and what is in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub now: Tick,
    pub db: Db,
    pub members: Vec<Member>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    /// How many interventions were used: kill and restart, stop, resign, request_resign.
    pub interventions: u8,
    /// The highest term any row ever had, and whether a row's term ever went back or a new tenure
    /// reused one.
    pub highest: Term,
    pub term_went_back: bool,
    /// The highest term told `Elected`, and whether an `Elected` told a term not above it.
    pub elected: Term,
    pub elected_went_back: bool,
    /// An `Elected` was told while the member's last event was an `Elected` (no `Lost` between).
    pub gain_before_loss: bool,
    /// What the standby has received, once its replication stopped (`None`: all of it).
    pub standby: Option<Standby>,
    pub failovers: u8,
    /// How many fenced transactions were begun.
    pub fences: u8,
}

/// The committed state a lagging standby has: the row, the sequence and the promotion record.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Standby {
    pub row: Option<Row>,
    pub seq: Term,
    pub record: Record,
}

/// One step: a statement sent or executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Member `m`'s campaign thread sends a statement (a poll, or a resignation waiting).
    Send(usize, Op),
    /// The database executes in-flight statement `i`.
    Exec(usize),
    /// Answer `i` reaches its member, which decides and tells.
    Deliver(usize),
    /// Member `m` stops waiting (answer late, lost, or the connection lost after the commit: the
    /// outcome is unknown, the call fails); the statement may still execute.
    GiveUp(usize),
    /// Member `m`'s watcher: its local deadline passed with no renewal, `Lost` `Expired`.
    Watch(usize),
    /// `Leadership::stop` on member `m` (on the caller's thread).
    Stop(usize),
    /// `Elector::resign` on member `m`'s campaigning elector (on the caller's thread).
    Resign(usize),
    /// An operator (or a member) sends request_resign.sql.
    RequestResign,
    /// Member `m` is killed and restarts under holder name `holder`.
    Restart(usize, Holder),
    /// A clone of member `m`'s elector sends `Elector::is_leader`'s statement (a poll, or the
    /// resignation waiting).
    CloneSend(usize, Op),
    /// The clone of member `m` stops waiting: the call fails, and a failed poll drops the
    /// leadership (`Elector::is_leader`).
    CloneGiveUp(usize),
    /// Member `m`'s user begins a transaction and sends fence.sql for the term it leads with.
    Fence(usize),
    /// Member `m`'s fenced transaction commits its write (and releases its FOR SHARE lock).
    Commit(usize),
    /// The standby stops receiving WAL: every commit from now on is lost in a failover.
    Lag,
    /// The primary fails and the standby is promoted: the table, its sequence and its record go
    /// back to what the standby received, the timeline grows by one, statements in flight are lost
    /// (answers already sent still arrive).
    Failover,
}

/// Member `m`'s statements in flight are no longer waited for, and its answers never read: its
/// campaign's (`Some(false)`), its clone's (`Some(true)`) or both (`None`).
pub(super) fn orphan(state: &mut State, m: usize, clone: Option<bool>) {
    let thread = |member: usize, of_clone: bool| member == m && clone.is_none_or(|c| c == of_clone);
    for msg in &mut state.inflight {
        if msg.member.is_some_and(|member| thread(member, msg.clone)) {
            msg.member = None;
        }
    }
    // A read of who leads that nobody waits for changes nothing when it executes.
    state
        .inflight
        .retain(|msg| msg.member.is_some() || msg.op != Op::Observe);
    state.answers.retain(|answer| {
        let (member, of_clone) = answer.to();
        !thread(member, of_clone)
    });
}

/// Notes the row's term after a step that may have changed it (`before`: its term before): the
/// highest term seen, and whether a term went back or a new tenure reused one.
pub(super) fn note_term(state: &mut State, before: Option<Term>) {
    if let Some(row) = &state.db.row {
        if before.is_some_and(|before| row.term < before)
            || (before != Some(row.term) && row.term <= state.highest && state.highest > 0)
        {
            state.term_went_back = true;
        }
        state.highest = state.highest.max(row.term);
    }
}
