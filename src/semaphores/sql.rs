//! A semaphore's own statements (the acquire, the holders), rendered once for a table, and one
//! function per operation. A held permit renews, fences and releases with the lease statements on
//! the same table ([`crate::leases::Statements::of_kind`]).

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use postgres::Row;

use crate::db::{Db, Grant, GrantAnswer, Policy, Promotion, PromotionRecord};
use crate::error::Result;
use crate::migrations::{Gate, Kind};
use crate::row::Read;
use crate::statement::Statement;
use crate::table_name::{render, TableName};

const ACQUIRE: &str = include_str!("../../sql/semaphores/acquire.sql");
const HOLDERS: &str = include_str!("../../sql/semaphores/holders.sql");
const LIST: &str = include_str!("../../sql/semaphores/list.sql");
const SUMMARY: &str = include_str!("../../sql/semaphores/summary.sql");

/// The statements, rendered once for a table, each typed by its parameters.
pub(super) struct Statements {
    pub(super) table: TableName,
    /// The check of the table's schema version before the first statement.
    gate: Gate,
    /// A grant whose own parameter is the permits the acquire allows.
    acquire: Statement<Grant<'static, i32>>,
    /// key.
    holders: Statement<(&'static str,)>,
    /// prefix.
    list: Statement<(&'static str,)>,
    /// how many keys to send.
    summary: Statement<(i64,)>,
    /// Reads (and records) the table's promotion record before grants.
    pub(super) promotion: PromotionRecord,
}

/// What an acquire's statement answered (`sql/semaphores/acquire.sql`).
#[derive(Debug, Default)]
pub(super) struct AcquireAnswer {
    /// `(slot, token)` when granted.
    pub(super) granted: Option<(i32, i64)>,
    /// A slot looked free and another acquirer took it meanwhile: worth sending again.
    pub(super) contended: bool,
    /// The server is on another timeline than the promotion record sent.
    pub(super) stale: bool,
}

impl GrantAnswer for AcquireAnswer {
    fn stale(&self) -> bool {
        self.stale
    }

    fn granted(&self) -> bool {
        self.granted.is_some()
    }
}

/// A live permit's row as [`Statements::holders`] reads it (`sql/semaphores/holders.sql`).
pub(super) struct HolderRow {
    pub(super) key: String,
    pub(super) slot: i32,
    pub(super) owner: String,
    pub(super) token: i64,
    pub(super) acquired_at: SystemTime,
    pub(super) held_until: SystemTime,
}

impl HolderRow {
    fn read(row: &Row, context: &str, table: &TableName) -> Result<HolderRow> {
        let read = Read::new(row, context, table);
        Ok(HolderRow {
            key: read.column("key")?,
            slot: read.column("slot")?,
            owner: read.column("owner")?,
            token: read.column("token")?,
            acquired_at: read.column("acquired_at")?,
            held_until: read.column("held_until")?,
        })
    }
}

impl Statements {
    pub(super) fn new(table: TableName) -> Arc<Statements> {
        Arc::new(Statements {
            gate: Gate::new(vec![(Kind::Semaphores, table.clone())]),
            acquire: Statement::new(render(ACQUIRE, &table)),
            holders: Statement::new(render(HOLDERS, &table)),
            list: Statement::new(render(LIST, &table)),
            summary: Statement::new(render(SUMMARY, &table)),
            promotion: PromotionRecord::new(&table),
            table,
        })
    }

    /// Checks, once per `Db`, that the table is at the schema version these statements need.
    pub(super) fn check_schema(&self, db: &Db) -> Result<()> {
        self.gate.check(db)
    }

    /// Grants `owner` one of `key`'s slots below `permits` for `ttl_us` when one is free (after
    /// [`Statements::check_schema`], which the caller ran); also
    /// returns the instant before the statement that answered was sent. Sent once: a statement
    /// whose outcome is unknown is not sent again (a second grant could take a second slot), and a
    /// permit it may have granted lapses unused at its TTL. An answer whose row cannot be read is
    /// an error although the grant may have been stored (it then lapses too).
    pub(super) fn acquire(
        &self,
        db: &Db,
        key: &str,
        owner: &str,
        ttl_us: i64,
        permits: i32,
        promotion: Promotion,
    ) -> Result<(AcquireAnswer, Instant)> {
        let params = promotion.grant_params(db, key, owner, ttl_us, permits);
        let mut sent = None;
        let rows = db.with_conn("acquire permit", Policy::ONCE, |conn| {
            sent = Some(Instant::now());
            db.run(conn, &self.acquire, &params)
        })?;
        // Set: the statement answered, so it was sent.
        let sent = sent.unwrap_or_else(Instant::now);
        let mut answer = AcquireAnswer::default();
        for row in &rows {
            let read = Read::new(row, "acquire permit", &self.table);
            if read.column("stale")? {
                answer.stale = true;
            } else if read.column("contended")? {
                answer.contended = true;
            } else if answer.granted.is_none() {
                answer.granted = Some((read.column("slot")?, read.column("token")?));
            }
        }
        Ok((answer, sent))
    }

    /// The live permits of `key`, by slot.
    pub(super) fn holders(&self, db: &Db, key: &str) -> Result<Vec<HolderRow>> {
        self.gate.check(db)?;
        let context = "read permit holders";
        let rows = db.query(context, Policy::IDEMPOTENT, &self.holders, &(key,))?;
        rows.iter()
            .map(|row| HolderRow::read(row, context, &self.table))
            .collect()
    }
}

/// A row of `sql/semaphores/summary.sql`: the counts (no key), or one of the busiest keys.
pub(super) struct SummaryRow {
    /// Keys with a row (the counts' row only).
    pub(super) keys: Option<i64>,
    /// Keys with a live permit (the counts' row only).
    pub(super) held_keys: Option<i64>,
    /// Live permits: of the table, or of the key.
    pub(super) held: i64,
    pub(super) key: Option<String>,
    pub(super) slots: Option<i32>,
}

impl Statements {
    /// The live permits of every key starting with `prefix`, by key and slot.
    pub(super) fn list(&self, db: &Db, prefix: &str) -> Result<Vec<HolderRow>> {
        self.gate.check(db)?;
        let context = "list permits";
        let rows = db.query(context, Policy::IDEMPOTENT, &self.list, &(prefix,))?;
        rows.iter()
            .map(|row| HolderRow::read(row, context, &self.table))
            .collect()
    }

    /// The counts, and the `busiest` keys with the most live permits.
    pub(super) fn summary(&self, db: &Db, busiest: i64) -> Result<Vec<SummaryRow>> {
        self.gate.check(db)?;
        let context = "summarize permits";
        let rows = db.query(context, Policy::IDEMPOTENT, &self.summary, &(busiest,))?;
        rows.iter()
            .map(|row| {
                let read = Read::new(row, context, &self.table);
                Ok(SummaryRow {
                    keys: read.column("keys")?,
                    held_keys: read.column("held_keys")?,
                    held: read.column("held")?,
                    key: read.column("key")?,
                    slots: read.column("slots")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_built_with_its_parameters() {
        // Building checks each statement's `$n` against its parameter types.
        let sql = Statements::new(TableName::parse("ops.limits").unwrap());
        assert!(sql
            .acquire
            .text()
            .contains("nextval('\"ops\".\"limits_token_seq\"')"));
        assert!(!sql.holders.text().contains("{table"));
    }
}
