//! The leases protocol (`sql/leases/*.sql` and the managed lease's local steps around them).
//!
//! One key. Time is discrete: `State::now` is the database clock in ticks; every process's local
//! `Instant` advances with it (a host clock step moves the wall clock, which no ownership decision
//! reads, so local instants are modelled as the same monotonic ticks; clock *rate* drift is not
//! modelled). A statement's transaction starts when it is sent: its `now()` is the tick it was sent
//! at, and it executes (atomically, against the newest row, as READ COMMITTED re-checks) at any later
//! step, or never. Starting the transaction at the send is the tightest case for the properties: a
//! transaction that starts later only makes the database's expiry later than the sender's local
//! deadline, which is recorded at the send.
//!
//! The step functions on [`Db`] ([`Db::acquire`], [`Db::renew_tenure`], ...) are one statement each,
//! the very code the differential test (`tests/differential.rs`) compares with the statement in
//! `sql/leases/` run against PostgreSQL.

use stateright::{Model, Property};

/// A time in ticks of the database clock (and of every local monotonic clock).
pub type Tick = i8;
/// A fencing token.
pub type Token = u8;
/// An owner name (`0` = "a", `1` = "b" in the differential test).
pub type Owner = u8;

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

/// A statement as a process sends it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Op {
    /// Leases::acquire (managed, `raw` false) or a raw grant (`raw` true).
    Acquire { raw: bool },
    /// A managed lease's renewal.
    RenewTenure { token: Token },
    /// The raw batch renewal.
    Renew,
    /// A managed release (with its token) or a raw release by key (`None`).
    Release { token: Option<Token> },
    /// fence.sql inside the caller's transaction.
    Fence { token: Token },
}

/// A statement in flight: sent (its transaction started at `now`), not executed yet.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Msg {
    pub proc: usize,
    /// Its sender no longer waits for it (gave up, or was killed): its answer is never read.
    pub orphan: bool,
    pub owner: Owner,
    pub op: Op,
    pub now: Tick,
}

/// An answer on its way back.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Answer {
    pub proc: usize,
    /// Acquire/renew: the token (and renewal) or `None`; release: nothing to tell; fence: admitted.
    pub granted: Option<Token>,
}

/// What a holder holds and until when it believes it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Tenure {
    pub token: Token,
    pub raw: bool,
    /// Local instant (ticks) past which it no longer believes.
    pub deadline: Tick,
}

/// A process using the leases.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Proc {
    pub owner: Owner,
    pub raw: bool,
    pub tenure: Option<Tenure>,
    /// The statement it waits on and the local instant recorded before sending it.
    pub waiting: Option<(Op, Tick)>,
    /// Inside a user transaction whose fence admitted `token` (its FOR SHARE lock held).
    pub fenced: Option<Token>,
}

impl Proc {
    fn believes(&self, now: Tick) -> Option<&Tenure> {
        self.tenure.as_ref().filter(|tenure| now < tenure.deadline)
    }
}

/// The whole system: the database clock, the table, the processes and what is in flight.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub now: Tick,
    pub db: Db,
    pub procs: Vec<Proc>,
    pub inflight: Vec<Msg>,
    pub answers: Vec<Answer>,
    pub restarts: u8,
    /// Tokens whose tenure an operator's force-release ended (their holders may still believe until
    /// their local deadline: the fence is what protects then).
    pub forced: Vec<Token>,
    /// The highest token any row ever had, and whether a row's token ever went back or a new tenure
    /// reused one.
    pub highest: Token,
    pub token_went_back: bool,
}

/// One step: a statement executed, a local step, or the environment's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The database clock (and every local clock) advances one tick.
    Tick,
    /// Process `p` sends a statement.
    Send(usize, Op),
    /// The database executes in-flight statement `i`.
    Exec(usize),
    /// Answer `i` reaches its process.
    Deliver(usize),
    /// Process `p` stops waiting (answer late, lost, or the connection lost after the commit: the
    /// outcome is unknown); the statement may still execute.
    GiveUp(usize),
    /// Process `p`'s fenced transaction commits its write (and releases its FOR SHARE lock).
    Commit(usize),
    /// An operator or contender: supersede.sql, force_release.sql, a sweep.
    Supersede,
    ForceRelease,
    Sweep,
    /// Process `p` is killed and restarts as `owner`, raw or managed.
    Restart(usize, Owner, bool),
}

/// The model's bounds.
#[derive(Clone, Debug)]
pub struct Leases {
    /// Each process's owner name and whether it uses raw grants.
    pub procs: Vec<(Owner, bool)>,
    pub ttl: Tick,
    /// The last tick of the run.
    pub max_now: Tick,
    pub max_inflight: usize,
    /// The most tokens the sequence hands out (every new tenure draws one).
    pub max_tokens: Token,
    pub max_restarts: u8,
    pub operator: bool,
    pub hole: Option<Hole>,
    /// Lifts the assumption that a raw user waits for its release's outcome (see
    /// docs/reliability.md, "Model checking"): the checker then finds a counterexample.
    pub raw_gives_up_on_release: bool,
}

impl Leases {
    /// The bounds CI checks exhaustively.
    pub fn ci() -> Leases {
        Leases {
            procs: vec![(0, false), (1, false)],
            ttl: 2,
            max_now: 2,
            max_inflight: 2,
            max_tokens: 2,
            max_restarts: 1,
            operator: true,
            hole: None,
            raw_gives_up_on_release: false,
        }
    }

    /// Deeper bounds, `PGTENURE_MODEL_DEPTH` ticks (for a release).
    pub fn deep(max_now: Tick) -> Leases {
        Leases {
            max_now,
            max_tokens: 3,
            ..Leases::ci()
        }
    }

    fn fence_lock(state: &State) -> Option<(usize, Token)> {
        state
            .procs
            .iter()
            .enumerate()
            .find_map(|(p, proc)| proc.fenced.map(|token| (p, token)))
    }
}

/// Process `p`'s statements in flight are no longer waited for, and its answers never read.
fn orphan(state: &mut State, p: usize) {
    for msg in &mut state.inflight {
        if msg.proc == p {
            msg.orphan = true;
        }
    }
    state.answers.retain(|a| a.proc != p);
}

fn note_token(state: &mut State, before: Option<Token>) {
    if let Some(row) = &state.db.row {
        if before.is_some_and(|before| row.token < before)
            || (before != Some(row.token) && row.token <= state.highest && state.highest > 0)
        {
            state.token_went_back = true;
        }
        state.highest = state.highest.max(row.token);
    }
}

impl Model for Leases {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            db: Db { row: None, seq: 1 },
            procs: self
                .procs
                .iter()
                .map(|&(owner, raw)| Proc {
                    owner,
                    raw,
                    tenure: None,
                    waiting: None,
                    fenced: None,
                })
                .collect(),
            inflight: Vec::new(),
            answers: Vec::new(),
            restarts: 0,
            forced: Vec::new(),
            highest: 0,
            token_went_back: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.now < self.max_now {
            actions.push(Action::Tick);
        }
        let room = state.inflight.len() < self.max_inflight;
        for (p, proc) in state.procs.iter().enumerate() {
            if let Some((op, _)) = &proc.waiting {
                // Assumed: a raw user does not act again before its release's outcome is known.
                // Otherwise a release whose answer was lost can execute after a re-acquire of the
                // same owner name, which keeps the token, and end the grant its holder believes
                // (see docs/reliability.md, "Model checking").
                if self.raw_gives_up_on_release || !(proc.raw && matches!(op, Op::Release { .. })) {
                    actions.push(Action::GiveUp(p));
                }
                continue;
            }
            if proc.fenced.is_some() {
                actions.push(Action::Commit(p));
                continue;
            }
            if !room {
                continue;
            }
            match &proc.tenure {
                None => actions.push(Action::Send(p, Op::Acquire { raw: proc.raw })),
                Some(tenure) => {
                    if state.now < tenure.deadline {
                        actions.push(Action::Send(
                            p,
                            if tenure.raw {
                                Op::Renew
                            } else {
                                Op::RenewTenure {
                                    token: tenure.token,
                                }
                            },
                        ));
                    }
                    // release_tenure (raw) and a managed lease's release: guarded by the token.
                    // A raw release by key (`Leases::release`) ends whatever tenure the owner name
                    // holds when it executes, a later grant of the same name included (as
                    // documented): the differential test covers its statement, the checker does
                    // not offer it.
                    actions.push(Action::Send(
                        p,
                        Op::Release {
                            token: Some(tenure.token),
                        },
                    ));
                    actions.push(Action::Send(
                        p,
                        Op::Fence {
                            token: tenure.token,
                        },
                    ));
                }
            }
        }
        let lock = Leases::fence_lock(state);
        for (i, msg) in state.inflight.iter().enumerate() {
            // Every statement but the fence updates the row: it waits for another transaction's
            // FOR SHARE lock (the fence's own transaction runs no other statement).
            let blocked = lock.is_some() && !matches!(msg.op, Op::Fence { .. });
            if !blocked {
                actions.push(Action::Exec(i));
            }
        }
        for i in 0..state.answers.len() {
            actions.push(Action::Deliver(i));
        }
        if self.operator && lock.is_none() {
            let live = state
                .db
                .row
                .as_ref()
                .is_some_and(|row| row.held_until > state.now);
            if live && !state.db.row.as_ref().is_some_and(|row| row.superseded) {
                actions.push(Action::Supersede);
            }
            if live {
                actions.push(Action::ForceRelease);
            }
            if state
                .db
                .row
                .as_ref()
                .is_some_and(|row| row.held_until < state.now)
            {
                actions.push(Action::Sweep);
            }
        }
        if state.restarts < self.max_restarts {
            // The last process is killed and restarts under its own name or the first process's
            // (another process with the same owner name), managed or raw.
            let p = state.procs.len() - 1;
            for owner in [state.procs[0].owner, state.procs[p].owner] {
                for raw in [false, true] {
                    actions.push(Action::Restart(p, owner, raw));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Tick => state.now += 1,
            Action::Send(p, op) => {
                let proc = &mut state.procs[p];
                if let Op::Release { .. } = op {
                    // A lease stops believing before its release is sent.
                    proc.tenure = None;
                }
                proc.waiting = Some((op.clone(), state.now));
                state.inflight.push(Msg {
                    proc: p,
                    orphan: false,
                    owner: proc.owner,
                    op,
                    now: state.now,
                });
            }
            Action::Exec(i) => {
                let msg = state.inflight.remove(i);
                let before = state.db.row.as_ref().map(|row| row.token);
                let granted = match msg.op {
                    Op::Acquire { raw } => state
                        .db
                        .acquire(msg.now, msg.owner, self.ttl, raw, self.hole)
                        .map(|(token, _)| token),
                    Op::RenewTenure { token } => state
                        .db
                        .renew_tenure(msg.now, msg.owner, token, self.ttl, self.hole)
                        .map(|_| token),
                    Op::Renew => state
                        .db
                        .renew(msg.now, msg.owner, self.ttl)
                        .map(|(token, _)| token),
                    Op::Release { token } => {
                        state.db.release(msg.now, msg.owner, token);
                        None
                    }
                    Op::Fence { token } => {
                        // clock_timestamp(): the execution's tick, not the transaction's start.
                        state.db.fence(state.now, msg.owner, token).then_some(token)
                    }
                };
                note_token(&mut state, before);
                if !msg.orphan {
                    state.answers.push(Answer {
                        proc: msg.proc,
                        granted,
                    });
                    if let Op::Fence { token } = msg.op {
                        // The FOR SHARE lock is held from the statement on, answer delivered or
                        // not.
                        if granted.is_some() && self.hole != Some(Hole::FenceWithoutShareLock) {
                            state.procs[msg.proc].fenced = Some(token);
                        }
                    }
                }
            }
            Action::Deliver(i) => {
                let answer = state.answers.remove(i);
                let now = state.now;
                let ttl = self.ttl;
                let hole = self.hole;
                let proc = &mut state.procs[answer.proc];
                let (op, sent_at) = proc.waiting.take()?;
                let recorded = if hole == Some(Hole::DeadlineAfterAnswer) {
                    now
                } else {
                    sent_at
                };
                match op {
                    Op::Acquire { raw } => {
                        if let Some(token) = answer.granted {
                            proc.tenure = Some(Tenure {
                                token,
                                raw,
                                deadline: recorded + ttl,
                            });
                        }
                    }
                    Op::RenewTenure { .. } | Op::Renew => match answer.granted {
                        Some(token) => {
                            if let Some(tenure) = proc.tenure.as_mut() {
                                if tenure.token == token {
                                    tenure.deadline = tenure.deadline.max(recorded + ttl);
                                }
                            }
                        }
                        None => proc.tenure = None,
                    },
                    Op::Release { .. } => {}
                    Op::Fence { .. } => {
                        // Refused: the user's transaction rolls back. Admitted: it goes on to
                        // its write (the lock is already held, see Exec).
                        if answer.granted.is_none() {
                            proc.fenced = None;
                        } else if hole == Some(Hole::FenceWithoutShareLock) {
                            proc.fenced = answer.granted;
                        }
                    }
                }
            }
            Action::GiveUp(p) => {
                // Its answer will never be read; a fence's transaction is rolled back.
                let proc = &mut state.procs[p];
                proc.waiting = None;
                proc.fenced = None;
                orphan(&mut state, p);
            }
            Action::Commit(p) => {
                // The property checks, in the state before this step, that the row still carries
                // the fenced tenure: the write commits under it.
                state.procs[p].fenced.take()?;
            }
            Action::Supersede => {
                state.db.supersede(state.now);
            }
            Action::ForceRelease => {
                let before = state.db.row.as_ref().map(|row| row.token);
                if state.db.force_release(state.now).is_some() {
                    if let Some(token) = before {
                        state.forced.push(token);
                        state.forced.sort_unstable();
                    }
                }
                note_token(&mut state, before);
            }
            Action::Sweep => {
                state.db.sweep(state.now);
            }
            Action::Restart(p, owner, raw) => {
                state.restarts += 1;
                let proc = &mut state.procs[p];
                // Killed: everything local is gone, its transaction (and a fence's lock) ends with
                // its connections; statements it sent may still execute.
                *proc = Proc {
                    owner,
                    raw,
                    tenure: None,
                    waiting: None,
                    fenced: None,
                };
                orphan(&mut state, p);
            }
        }
        Some(state)
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.db.seq <= self.max_tokens + 1
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two believers", |_, state| no_two_believers(state)),
            Property::always("a fence admits only the current tenure", |_, state| {
                fence_current(state)
            }),
            Property::always("a token never repeats or goes back", |_, state: &State| {
                !state.token_went_back
            }),
            Property::always(
                "the local deadline never falls after the database's expiry",
                |_, state| deadline_within_expiry(state),
            ),
        ]
    }
}

fn exempt(state: &State, p: usize, tenure: &Tenure) -> bool {
    // An operator's force-release ends a tenure whose holder still believes (the fence protects);
    // raw grants under one owner name are one holder by design (an idempotent re-acquire).
    state.forced.binary_search(&tenure.token).is_ok()
        || (tenure.raw
            && state.procs.iter().enumerate().any(|(q, other)| {
                q != p
                    && other.owner == state.procs[p].owner
                    && other.tenure.as_ref().is_some_and(|t| t.raw)
            }))
}

fn no_two_believers(state: &State) -> bool {
    let believers: Vec<(usize, &Tenure)> = state
        .procs
        .iter()
        .enumerate()
        .filter_map(|(p, proc)| proc.believes(state.now).map(|tenure| (p, tenure)))
        .filter(|(_, tenure)| state.forced.binary_search(&tenure.token).is_err())
        .collect();
    believers.iter().enumerate().all(|(i, (_, a))| {
        believers[i + 1..].iter().all(|(_, b)| {
            // The same tenure twice is allowed only for raw grants (one owner name, one holder).
            a.token == b.token && a.raw && b.raw
        })
    })
}

fn fence_current(state: &State) -> bool {
    state.procs.iter().all(|proc| match proc.fenced {
        None => true,
        Some(token) => state
            .db
            .row
            .as_ref()
            .is_some_and(|row| row.token == token && row.owner == proc.owner),
    })
}

fn deadline_within_expiry(state: &State) -> bool {
    state.procs.iter().enumerate().all(|(p, proc)| {
        let Some(tenure) = proc.believes(state.now) else {
            return true;
        };
        if exempt(state, p, tenure) {
            return true;
        }
        match &state.db.row {
            Some(row) if row.token == tenure.token => tenure.deadline <= row.held_until,
            // Its tenure ended in the database while it believes.
            _ => false,
        }
    })
}
