//! Giving up a tenure: at once ([`Elector::resign`]), or asked of whoever leads
//! ([`Elector::request_resign`]).

use std::sync::Weak;

use super::Elector;
#[cfg(doc)]
use super::{LeaderEvent, LeaderLoss, Leadership};
use crate::error::Result;
use crate::observe;

impl Elector {
    /// Gives up the leadership at once (guarded by holder and term), so the next `is_leader`
    /// elsewhere wins without waiting for the TTL. Does nothing, and sends nothing, when this elector
    /// has won no term it has not seen end.
    ///
    /// This elector stops believing before the statement is sent ([`Elector::term`] is `None`
    /// from then on), but keeps the term until a resignation of it succeeds: a `resign` that failed
    /// (a timeout, a lost connection) can be called again, and resigns the same term. Meanwhile the
    /// term is never renewed: the next [`Elector::is_leader`] sends the resignation first (see
    /// there). The statement is guarded by holder and term, so sending it again never ends a
    /// newer tenure.
    ///
    /// On the elector of a running campaign ([`Elector::campaign`]: [`Leadership::elector`], or a
    /// clone of the elector campaigning), the campaign stops believing first: its
    /// [`Leadership::is_leading`] turns false and it delivers [`LeaderEvent::Lost`] with
    /// [`LeaderLoss::Resigned`] (to the events and the hooks) before the resignation is sent, so the
    /// database frees the leadership only after its holder stopped believing in it. The campaign
    /// then stands aside for one TTL (it only observes who leads), so that another member wins, and
    /// campaigns again. Called from one of that campaign's own hooks, the resignation is left to the
    /// campaign's thread, which sends it once the hook returned and the `Lost` was delivered (at its
    /// next poll at the latest); this call then returns `Ok` without sending it.
    ///
    /// # Errors
    ///
    /// A database or connection error; call `resign` again (or let the tenure expire at its TTL).
    pub fn resign(&self) -> Result<()> {
        let campaign = self
            .tenure
            .lock()
            .campaign
            .0
            .as_ref()
            .and_then(Weak::upgrade);
        if let Some(campaign) = campaign {
            return campaign.resign();
        }
        self.stand_down();
        self.finish_resign()
    }

    /// Stops believing in the tenure at once: the term it won becomes the one to resign
    /// ([`Elector::finish_resign`]), never renewed; a poll in flight (on a clone) does not bring it
    /// back. Returns whether it believed in a term.
    pub(super) fn stand_down(&self) -> bool {
        let mut tenure = self.tenure.lock();
        tenure.resigned += 1;
        tenure.deadline = None;
        if let Some(term) = tenure.term.take() {
            // A term still waiting to be resigned is older and over: this one was won (with no
            // guard) only once that row was free or expired.
            tenure.resigning = Some(term);
            drop(tenure);
            observe::leader_stood_down(&self.name);
            return true;
        }
        false
    }

    /// Wake-ups when this fleet's leadership is resigned, in a process with handover notifications
    /// on ([`DbBuilder::handover_notifications`](crate::DbBuilder::handover_notifications)): a
    /// loop of the caller's own around [`Elector::is_leader`] polls at once on one, rather than at
    /// its next period. A hint: the poll decides.
    pub fn watch_resigned(&self) -> crate::Freed {
        self.db.watch_freed(&self.sql.table, &self.name)
    }

    /// Whether a term waits to be resigned ([`Elector::finish_resign`]).
    pub(super) fn resign_pending(&self) -> bool {
        self.tenure.lock().resigning.is_some()
    }

    /// Resigns the term this elector stood down from, if any; forgets it only once the statement
    /// succeeded (it finds the tenure live and ends it, or finds it over). The statement is
    /// idempotent (guarded by holder and term), so a failure, even one of unknown outcome, leaves
    /// it to be sent again.
    pub(super) fn finish_resign(&self) -> Result<()> {
        let Some(term) = self.tenure.lock().resigning else {
            return Ok(());
        };
        let resigned = self.sql.resign(&self.db, &self.name, &self.holder, term)?;
        {
            let mut tenure = self.tenure.lock();
            if tenure.resigning == Some(term) {
                tenure.resigning = None;
            }
        }
        if resigned {
            log::info!(
                target: "pgtenure::elector",
                "{} resigned the leadership of fleet {:?} (term {term})",
                self.holder,
                self.name
            );
        }
        Ok(())
    }

    /// Asks the fleet's live leader to step down (a rolling deploy, moving leadership off a node):
    /// its next renewal does not extend its tenure; the leader stops believing (a campaigning
    /// leader reports [`LeaderLoss::ResignRequested`], a polling one gets `false`), then resigns,
    /// and the next poll elsewhere wins. The database frees the leadership only after its holder
    /// has stopped believing in it: if the leader dies in between, its tenure expires at its old
    /// expiry. Returns whether a live leader was asked. Any member may ask, the leader too.
    ///
    /// # Errors
    ///
    /// A database or connection error.
    pub fn request_resign(&self) -> Result<bool> {
        let asked = self.sql.request_resign(&self.db, &self.name)?;
        if let Some((holder, term)) = &asked {
            log::info!(
                target: "pgtenure::elector",
                "asked {holder} to step down from fleet {:?} (term {term})",
                self.name,
            );
        }
        Ok(asked.is_some())
    }
}
