//! One poll: the statement of [`Elector::is_leader`], and how its answer becomes the tenure.

use std::time::Instant;

use super::sql::PollAnswer;
use super::{Elector, KnownTenure, LeaderInfo};
use crate::error::Result;
use crate::observe;

/// What one poll found.
#[derive(Debug, Clone)]
pub(super) struct Poll {
    /// This elector leads, and the answer came before the tenure's local deadline.
    pub(super) leading: bool,
    /// This elector was asked to step down ([`Elector::request_resign`]): the poll did not extend
    /// its tenure, and it stopped believing in it; the term waits to be resigned.
    pub(super) ended: bool,
    /// Who leads by the poll's statement (this elector included).
    pub(super) leader: Option<LeaderInfo>,
    /// The poll won a term this elector did not hold before.
    pub(super) won: bool,
}

impl Elector {
    /// Whether this instance leads the fleet now: renews the tenure if it holds it, takes it if it is
    /// free or expired. One statement, one round trip; a follower's poll writes nothing.
    ///
    /// Renewals are guarded by term: an elector renews only the term it won, so a second elector
    /// with the same holder name (a misconfiguration, or a restarted process that reuses its name)
    /// never adopts another's tenure; it waits until that tenure is resigned or expires. Answers
    /// `false` when the answer arrives after the tenure's local deadline (the instant before the poll
    /// was sent, plus the TTL).
    ///
    /// A renewal that finds a resignation requested ([`Elector::request_resign`]) answers `false`
    /// and leaves the tenure as it was, neither extended nor ended, so that this instance stops
    /// believing before anyone else can be elected. The next call resigns it (as after a
    /// [`resign`](Elector::resign) that failed, below); until then it expires at its old expiry.
    ///
    /// After a [`resign`](Elector::resign) that failed, or a requested resignation, the next call
    /// sends that resignation first (the tenure is never renewed again) and answers `false` without
    /// campaigning, so that another member wins; the call after it campaigns again. When that
    /// resignation fails, its error is returned and the next call tries again.
    ///
    /// When the connection fails after the poll was sent, it is sent once more on another
    /// connection: a renewal is idempotent. A new tenure won by a poll whose answer was lost is not
    /// adopted (nothing can tell it from another elector's with the same name): it expires after one
    /// TTL, as after a crash.
    ///
    /// # Errors
    ///
    /// A database or connection error; leadership is dropped first, so [`Elector::term`] is `None`
    /// until a poll succeeds again. Treat an error as "not the leader".
    pub fn is_leader(&self) -> Result<bool> {
        if self.tenure.lock().resigning.is_some() {
            self.finish_resign()?;
            return Ok(false);
        }
        Ok(self.poll_keeping(false)?.leading)
    }

    /// One poll (the statement of [`Elector::is_leader`]), adopting its outcome into the shared
    /// tenure; also says who leads by that statement's view. A failed poll drops the leadership at
    /// once, unless `keep` (the campaign's loop: its watcher ends it at the local deadline).
    pub(super) fn poll_keeping(&self, keep: bool) -> Result<Poll> {
        let polled = self.adopt_poll(keep);
        let leading = polled.as_ref().ok().map(|poll| poll.leading);
        let won = polled.as_ref().is_ok_and(|poll| poll.won);
        observe::leader_poll(&self.name, leading, keep, won);
        polled
    }

    /// [`Elector::poll_keeping`] but for the metrics.
    fn adopt_poll(&self, keep: bool) -> Result<Poll> {
        let (guard, epoch) = {
            let tenure = self.tenure.lock();
            (tenure.term, tenure.resigned)
        };
        // The campaign's poll waits for a connection until its next turn at most.
        let until = keep.then(|| Instant::now() + self.retry_period());
        let result = self.send_poll(guard, until);
        let mut tenure = self.tenure.lock();
        let (answer, sent) = match result {
            Ok(answered) => answered,
            Err(e) => {
                if !keep {
                    tenure.deadline = None;
                }
                return Err(e);
            }
        };
        let PollAnswer {
            leader,
            mine,
            ended,
            my_term,
            ..
        } = answer;
        let leader = leader.map(LeaderInfo::from);
        let ended = my_term.filter(|_| ended);
        let won = my_term.filter(|_| mine);
        let not_leading = Poll {
            leading: false,
            ended: ended.is_some(),
            leader: leader.clone(),
            won: false,
        };
        if tenure.resigned != epoch {
            // A clone resigned (or a campaign stopped) while this poll was in flight: whatever it
            // renewed or won is being given up (or already was); do not lead on it.
            resign_won_meanwhile(&mut tenure, won);
            return Ok(not_leading);
        }
        let Some(term) = won else {
            self.forget_term(&mut tenure, guard, ended);
            return Ok(not_leading);
        };
        Ok(self.lead(&mut tenure, term, sent + self.ttl, leader))
    }

    /// Sends the poll's statement, guarded by the term this elector holds (if any), under the
    /// promotion hold-off, waiting for a pool connection until `until` at most; returns its answer
    /// and when it was sent.
    fn send_poll(
        &self,
        guard: Option<i64>,
        until: Option<Instant>,
    ) -> Result<(PollAnswer, Instant)> {
        self.sql.check_schema(&self.db).and_then(|()| {
            self.db
                .grant(&self.sql.promotion, self.ttl_us, |promotion| {
                    let (name, holder) = (&self.name, &self.holder);
                    self.sql
                        .is_leader(&self.db, name, holder, self.ttl_us, guard, promotion, until)
                })
        })
    }

    /// A poll that won nothing: the term it was guarded by has ended (or was asked to step down,
    /// `ended`), unless another poll (on a clone) has moved the tenure on meanwhile.
    fn forget_term(&self, tenure: &mut KnownTenure, guard: Option<i64>, ended: Option<i64>) {
        // Forget the term only if no other poll (on a clone) has moved it on meanwhile.
        if tenure.term != guard {
            return;
        }
        if let Some(lost) = tenure.term.take() {
            log::info!(
                target: "pgtenure::elector",
                "{} no longer leads fleet {:?} (term {lost} {})",
                self.holder,
                self.name,
                if ended.is_some() {
                    "asked to step down: it resigns next"
                } else {
                    "ended"
                }
            );
        }
        tenure.deadline = None;
        if ended.is_some() {
            // Still live in the database, at its old expiry: resigned once this belief's
            // end has been told (the campaign's `Lost`, or is_leader's `false`).
            tenure.resigning = ended;
        }
    }

    /// A poll that won or renewed `term`: this elector leads until `deadline` (the instant the poll
    /// was sent, plus the TTL).
    fn lead(
        &self,
        tenure: &mut KnownTenure,
        term: i64,
        deadline: Instant,
        leader: Option<LeaderInfo>,
    ) -> Poll {
        let new_term = tenure.term != Some(term);
        if new_term {
            log::info!(
                target: "pgtenure::elector",
                "{} leads fleet {:?} with term {term}",
                self.holder,
                self.name
            );
        }
        // Keep the term even if the answer came too late: resign() then still targets this tenure.
        tenure.term = Some(term);
        tenure.deadline = Some(deadline);
        Poll {
            leading: Instant::now() < deadline,
            ended: false,
            leader,
            won: new_term,
        }
    }

    /// The current tenure's term while this instance leads (by its last successful poll and the local
    /// deadline), else `None`.
    pub fn term(&self) -> Option<i64> {
        self.tenure.lock().leading(Instant::now())
    }
}

/// A term `won` anew by a poll in flight while the tenure was given up is resigned like the one
/// given up (the statement is guarded by holder and term), rather than left to expire.
fn resign_won_meanwhile(tenure: &mut KnownTenure, won: Option<i64>) {
    if let Some(term) = won {
        // Terms only grow: a newer term waiting to be resigned is not replaced.
        if tenure.term.is_none() && tenure.resigning.is_none_or(|waiting| waiting <= term) {
            tenure.resigning = Some(term);
        }
    }
}
