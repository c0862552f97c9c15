//! One poll: the statement of [`Elector::is_leader`], and how its answer becomes the tenure.

use std::time::{Duration, Instant};

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
    /// Nobody leads, and only the hold-off after a promotion kept this poll from winning: it
    /// opens for this holder in that long (the campaign polls again then).
    pub(super) held_off: Option<Duration>,
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
        let (guard, last, epoch) = {
            let tenure = self.tenure.lock();
            (tenure.term, tenure.last, tenure.resigned)
        };
        // The campaign's poll waits for a connection until its next turn at most.
        let until = keep.then(|| Instant::now() + self.retry_period());
        let result = self.send_poll(guard, last, until);
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
            held_off,
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
            held_off,
        };
        match tenure.adopt(guard, epoch, won, ended) {
            Adopted::GivenUp => Ok(not_leading),
            Adopted::NotWon { lost } => {
                if let Some(lost) = lost {
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
                Ok(not_leading)
            }
            Adopted::Won(term) => Ok(self.lead(&mut tenure, term, sent + self.ttl, leader)),
        }
    }

    /// Sends the poll's statement, guarded by the term this elector holds (if any), under the
    /// promotion hold-off, waiting for a pool connection until `until` at most; returns its answer
    /// and when it was sent.
    fn send_poll(
        &self,
        guard: Option<i64>,
        last: Option<i64>,
        until: Option<Instant>,
    ) -> Result<(PollAnswer, Instant)> {
        self.sql.check_schema(&self.db).and_then(|()| {
            self.db
                .grant(&self.sql.promotion, self.ttl_us, |promotion| {
                    let (name, holder) = (&self.name, &self.holder);
                    // After a promotion's hold-off, others wait one retry period (this one's) longer
                    // than the last holder (by name, or by the newest term it won) for a lapsed
                    // leadership. At most a TTL: a caller of is_leader of its own (no campaign)
                    // may have set any retry period, and no member waits more than a TTL for it.
                    let prefer = self.retry_period().min(self.ttl);
                    let prefer_us = i64::try_from(prefer.as_micros()).unwrap_or(i64::MAX);
                    let grant = (promotion, prefer_us, last);
                    self.sql
                        .is_leader(&self.db, name, holder, self.ttl_us, guard, grant, until)
                })
        })
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
        tenure.last = tenure.last.max(Some(term));
        tenure.deadline = Some(deadline);
        Poll {
            leading: Instant::now() < deadline,
            ended: false,
            leader,
            won: new_term,
            held_off: None,
        }
    }

    /// The current tenure's term while this instance leads (by its last successful poll and the local
    /// deadline), else `None`.
    pub fn term(&self) -> Option<i64> {
        self.tenure.lock().leading(Instant::now())
    }
}

/// What a poll's answer did to the tenure its clones share.
#[derive(Debug, PartialEq)]
enum Adopted {
    /// The tenure was given up while the poll was in flight: it leads on nothing it brought.
    GivenUp,
    /// It won nothing; `lost` is the term it forgot, if it held one.
    NotWon { lost: Option<i64> },
    /// It won or renewed this term.
    Won(i64),
}

impl KnownTenure {
    /// Adopts a poll's answer (`won`: the term it won or renewed; `ended`: the term it was asked
    /// to step down from), for a poll sent guarded by `guard` when the tenure's give-ups counted
    /// `epoch`.
    fn adopt(
        &mut self,
        guard: Option<i64>,
        epoch: u64,
        won: Option<i64>,
        ended: Option<i64>,
    ) -> Adopted {
        if self.resigned != epoch {
            // A clone resigned, a campaign stopped, or a poll was told to step down while this
            // poll was in flight: whatever it renewed or won is being given up (or already was);
            // do not lead on it.
            resign_won_meanwhile(self, won);
            return Adopted::GivenUp;
        }
        match won {
            Some(term) => Adopted::Won(term),
            None => Adopted::NotWon {
                lost: self.forget_term(guard, ended),
            },
        }
    }

    /// A poll that won nothing: the term it was guarded by has ended (or was asked to step down,
    /// `ended`), unless another poll (on a clone) has moved the tenure on meanwhile. Returns the
    /// term forgotten.
    fn forget_term(&mut self, guard: Option<i64>, ended: Option<i64>) -> Option<i64> {
        // Forget the term only if no other poll (on a clone) has moved it on meanwhile.
        if self.term != guard {
            return None;
        }
        let lost = self.term.take();
        self.deadline = None;
        if ended.is_some() {
            // Still live in the database, at its old expiry: resigned once this belief's end has
            // been told (the campaign's `Lost`, or is_leader's `false`). A renewal of the same
            // term in flight meanwhile (on a clone, or the campaign's when a clone was told)
            // executed before the request: its answer must not bring the term back, or this
            // elector would lead on it while the resignation frees the row for another. So this
            // gives the tenure up, as a resignation does.
            self.resigning = ended;
            self.resigned += 1;
        }
        lost
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

#[cfg(test)]
mod tests {
    use super::{Adopted, KnownTenure};

    /// Two polls on clones, both sent while the elector held term 7: the one that ran after
    /// `request_resign` is answered first (`ended`), the renewal that ran before the request is
    /// answered after it. Leading on the renewal would make a second leader once the term is
    /// resigned (found by the model checker: docs/reliability.md).
    #[test]
    fn a_renewal_answered_after_a_request_to_step_down_does_not_lead_again() {
        let mut tenure = KnownTenure {
            term: Some(7),
            ..KnownTenure::default()
        };
        let epoch = tenure.resigned;
        assert_eq!(
            tenure.adopt(Some(7), epoch, None, Some(7)),
            Adopted::NotWon { lost: Some(7) }
        );
        assert_eq!(tenure.resigning, Some(7));
        assert_eq!(
            tenure.adopt(Some(7), epoch, Some(7), None),
            Adopted::GivenUp
        );
        assert_eq!(tenure.term, None);
        assert_eq!(tenure.resigning, Some(7));
    }

    /// A term that ended without a request (another won the lapsed row) is forgotten, and a
    /// poll in flight then may still win a new term: nothing was given up.
    #[test]
    fn a_term_that_ended_on_its_own_does_not_give_up_the_polls_in_flight() {
        let mut tenure = KnownTenure {
            term: Some(7),
            ..KnownTenure::default()
        };
        let epoch = tenure.resigned;
        assert_eq!(
            tenure.adopt(Some(7), epoch, None, None),
            Adopted::NotWon { lost: Some(7) }
        );
        assert_eq!(tenure.resigning, None);
        assert_eq!(tenure.adopt(None, epoch, Some(9), None), Adopted::Won(9));
    }
}
