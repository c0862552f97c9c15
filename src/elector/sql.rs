//! The elector's statements, rendered once for a table, and one function per operation.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::db::{Db, GrantAnswer, Policy, Preferring, Promotion, PromotionRecord};
use crate::error::Result;
use crate::fence::{statement_text, Fence};
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const IS_LEADER: &str = include_str!("../../sql/elector/is_leader.sql");
const RESIGN: &str = include_str!("../../sql/elector/resign.sql");
const LEADER: &str = include_str!("../../sql/elector/leader.sql");
const FENCE: &str = include_str!("../../sql/elector/fence.sql");
const REQUEST_RESIGN: &str = include_str!("../../sql/elector/request_resign.sql");
const LEADERS: &str = include_str!("../../sql/elector/leaders.sql");

/// The statements, rendered once for a table, each typed by its parameters.
pub(super) struct Statements {
    pub(super) table: TableName,
    /// The check of the table's schema version before the first statement.
    gate: Gate,
    /// A grant whose own parameter is the term the poller holds, with the poller's retry period.
    is_leader: Statement<Preferring<'static, Option<i64>>>,
    /// Reads (and records) the table's promotion record before polls that may win.
    pub(super) promotion: PromotionRecord,
    /// name, holder, term.
    resign: Statement<Resign<'static>>,
    /// name.
    leader: Statement<(&'static str,)>,
    /// name.
    request_resign: Statement<(&'static str,)>,
    leaders: Statement<()>,
    /// Sent unprepared: it runs inside the caller's transaction, where a missing prepared
    /// statement would abort it.
    fence: Arc<str>,
}

/// A fleet's leader as the statements read it (`sql/elector/leader.sql`, `leaders.sql`, and the
/// poll's `is_leader.sql`).
#[derive(Debug)]
pub(super) struct LeaderRow {
    pub(super) name: String,
    pub(super) holder: String,
    pub(super) term: i64,
    pub(super) elected_at: SystemTime,
    pub(super) expires_at: SystemTime,
    /// Always `true` but in `leaders.sql`'s rows.
    pub(super) live: bool,
    /// Not read by a poll (`false` there).
    pub(super) resign_requested: bool,
}

/// What a poll's statement answered (`sql/elector/is_leader.sql`).
#[derive(Debug, Default)]
pub(super) struct PollAnswer {
    /// Who leads by the statement's view (this elector included); `None` after an ended tenure.
    pub(super) leader: Option<LeaderRow>,
    /// This elector leads now under `my_term`.
    pub(super) mine: bool,
    /// This elector was asked to step down: `my_term` waits to be resigned.
    pub(super) ended: bool,
    pub(super) my_term: Option<i64>,
    /// The server is on another timeline than the promotion record sent.
    pub(super) stale: bool,
    /// Nobody leads, and the hold-off after a promotion alone kept this poll from winning: it
    /// opens for this holder in that long (by the database clock).
    pub(super) held_off: Option<Duration>,
}

impl GrantAnswer for PollAnswer {
    fn stale(&self) -> bool {
        self.stale
    }

    fn granted(&self) -> bool {
        self.mine
    }
}

crate::params! {
    /// A resignation's parameters (`sql/elector/resign.sql`).
    struct Resign<'a> {
        name: &'a str,
        holder: &'a str,
        term: i64,
        /// The handover channel to notify, when notifications are on.
        channel: Option<&'a str>,
    }
}

impl Statements {
    /// Checks, once per `Db`, that the table is at the schema version these statements need (a
    /// grant reads the promotion record before its own statement).
    pub(super) fn check_schema(&self, db: &Db) -> Result<()> {
        self.gate.check(db)
    }

    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            gate: Gate::new(vec![(Kind::Elector, table.clone())]),
            is_leader: Statement::new(render(IS_LEADER, &table)),
            promotion: PromotionRecord::new(&table),
            resign: Statement::new(render(RESIGN, &table)),
            leader: Statement::new(render(LEADER, &table)),
            request_resign: Statement::new(render(REQUEST_RESIGN, &table)),
            leaders: Statement::new(render(LEADERS, &table)),
            fence: statement_text(&render(FENCE, &table)),
            table,
        })
    }

    /// Renews `name`'s leadership for `holder` under `term`, or wins it when free; also returns
    /// the instant before the statement that answered was sent. An answer whose row cannot be read
    /// is an error although the leadership may have been won or renewed (it then lapses at its
    /// TTL). It waits for a pool connection until `until` at most (the campaign's next turn), so
    /// that a poll never waits out an outage and then wins what lapsed during it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn is_leader(
        &self,
        db: &Db,
        name: &str,
        holder: &str,
        ttl_us: i64,
        term: Option<i64>,
        (promotion, prefer_us, last_term): (Promotion, i64, Option<i64>),
        until: Option<Instant>,
    ) -> Result<(PollAnswer, Instant)> {
        self.gate.check(db)?;
        let params = Preferring {
            grant: promotion.grant_params(db, name, holder, ttl_us, term),
            prefer_us,
            last_term,
        };
        let mut sent = Instant::now();
        let policy = until.map_or(Policy::IDEMPOTENT, |until| Policy::IDEMPOTENT.until(until));
        let rows = db.with_conn("elect leader", policy, |conn| {
            sent = Instant::now();
            db.run(conn, &self.is_leader, &params)
        })?;
        let Some(row) = rows.first() else {
            return Ok((PollAnswer::default(), sent));
        };
        let read = Read::new(row, "elect leader", &self.table);
        let leader = match read.column::<Option<String>>("holder")? {
            Some(holder) => Some(LeaderRow {
                name: name.to_owned(),
                holder,
                term: read.column("term")?,
                elected_at: read.column("elected_at")?,
                expires_at: read.column("expires_at")?,
                live: true,
                resign_requested: false,
            }),
            None => None,
        };
        let answer = PollAnswer {
            leader,
            mine: read.column("mine")?,
            ended: read.column("ended")?,
            my_term: read.column("my_term")?,
            stale: read.column("stale")?,
            held_off: (read.column::<Option<i64>>("held_off_us")?)
                .map(|us| Duration::from_micros(us.unsigned_abs())),
        };
        Ok((answer, sent))
    }

    /// Ends `holder`'s tenure `term` of `name`: whether it was live.
    pub(super) fn resign(&self, db: &Db, name: &str, holder: &str, term: i64) -> Result<bool> {
        self.gate.check(db)?;
        // The handover channel to notify, when notifications are on.
        let channel = db.freed_channel(&self.table);
        let params = Resign {
            name,
            holder,
            term,
            channel: channel.as_deref(),
        };
        let rows = db.query(
            "resign leadership",
            Policy::IDEMPOTENT,
            &self.resign,
            &params,
        )?;
        Ok(!rows.is_empty())
    }

    /// Asks `name`'s live leader to step down: its holder and term, when there is one.
    pub(super) fn request_resign(&self, db: &Db, name: &str) -> Result<Option<(String, i64)>> {
        self.gate.check(db)?;
        let rows = db.query(
            "request resignation",
            Policy::IDEMPOTENT,
            &self.request_resign,
            &(name,),
        )?;
        rows.first()
            .map(|row| {
                let read = Read::new(row, "request resignation", &self.table);
                Ok((read.column("holder")?, read.column("term")?))
            })
            .transpose()
    }

    /// `name`'s live leader.
    pub(super) fn leader(&self, db: &Db, name: &str) -> Result<Option<LeaderRow>> {
        self.gate.check(db)?;
        let rows = db.query("read leader", Policy::IDEMPOTENT, &self.leader, &(name,))?;
        rows.first()
            .map(|row| {
                let read = Read::new(row, "read leader", &self.table);
                Ok(LeaderRow {
                    name: name.to_owned(),
                    holder: read.column("holder")?,
                    term: read.column("term")?,
                    elected_at: read.column("elected_at")?,
                    expires_at: read.column("expires_at")?,
                    live: true,
                    resign_requested: read.column("resign_requested")?,
                })
            })
            .transpose()
    }

    /// Every fleet's row, in name order.
    pub(super) fn leaders(&self, db: &Db) -> Result<Vec<LeaderRow>> {
        self.gate.check(db)?;
        let rows = db.query("read leaders", Policy::IDEMPOTENT, &self.leaders, &())?;
        rows.iter()
            .map(|row| {
                let read = Read::new(row, "read leaders", &self.table);
                Ok(LeaderRow {
                    name: read.column("name")?,
                    holder: read.column("holder")?,
                    term: read.column("term")?,
                    elected_at: read.column("elected_at")?,
                    expires_at: read.column("expires_at")?,
                    live: read.column("live")?,
                    resign_requested: read.column("resign_requested")?,
                })
            })
            .collect()
    }

    /// The fence of `holder`'s tenure `term` of `name`: run inside a transaction, whether it is
    /// live (its row then locked `FOR SHARE` until the transaction ends).
    pub(super) fn fence(&self, name: &str, holder: &str, term: i64) -> Fence {
        Fence::new(
            "fence leadership",
            self.fence.clone(),
            vec![name.into(), holder.into(), term.into()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_built_with_its_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let sql = Statements::new(TableName::parse("ops.leaders").unwrap());
        assert!(sql.is_leader.text().contains("\"ops\".\"leaders\""));
        assert!(!sql.leaders.text().contains("{table"));
    }
}
