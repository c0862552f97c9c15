//! Creating a primitive's tables: under one advisory lock, checking the indexes and sequences
//! the statements rely on.

use postgres::types::Type;

use super::Db;
use crate::error::{Error, ErrorKind, Result};
use crate::row::Read;
use crate::table_name::{render, TableName};

const LOCK_SQL: &str = include_str!("../../sql/schema/lock.sql");
const EXISTS_SQL: &str = include_str!("../../sql/schema/table_exists.sql");
const COMPANION_SQL: &str = include_str!("../../sql/schema/companion.sql");
const CREATE_PROMOTION: &str = include_str!("../../sql/schema/create_promotion.sql");
const SEED_PROMOTION: &str = include_str!("../../sql/schema/seed_promotion.sql");

/// The transaction-level advisory lock key every pgtenure `create_table` takes ("pgtenure" in ASCII).
const DDL_LOCK_KEY: i64 = 0x7067_7465_6e75_7265;

impl Db {
    /// Creates a table and its companions (`ddl`, one statement each) unless `table` exists, under a
    /// transaction-level advisory lock so that every instance may call it at once: concurrent
    /// `CREATE TABLE IF NOT EXISTS` statements can otherwise fail on PostgreSQL's catalog. An
    /// existing table is left as it is, and then the role needs no `CREATE` privilege.
    ///
    /// Then checks that every companion in `expected` is what the statements need: `IF NOT EXISTS`
    /// skips an index or a sequence whose name another relation already has, so a name taken by a
    /// table (or a companion dropped by hand) would otherwise go unnoticed until it costs a scan or a
    /// failed `nextval`.
    pub(crate) fn create_table(
        &self,
        context: &str,
        table: &TableName,
        ddl: &[String],
        expected: &[Companion],
    ) -> Result<()> {
        let fail = |e| Error::from_postgres(context, e);
        let mut conn = self.conn_until(context, None)?;
        let mut tx = conn.transaction().map_err(fail)?;
        tx.query_typed(LOCK_SQL, &[(&DDL_LOCK_KEY, Type::INT8)])
            .map_err(fail)?;
        let quoted = table.quoted();
        let exists: bool = Read::server(
            &tx.query_typed_one(EXISTS_SQL, &[(&quoted, Type::TEXT)])
                .map_err(fail)?,
            context,
            &"to_regclass()",
        )
        .at(0)?;
        if exists {
            log::debug!(target: "pgtenure::db", "{context}: table {table} exists");
        } else {
            for statement in ddl {
                tx.batch_execute(statement).map_err(fail)?;
            }
        }
        for companion in expected {
            let mut found = companion_of(&mut tx, context, companion, &quoted)?;
            if found.is_none() && !companion.create.is_empty() {
                // A companion added in a later version: made for tables that predate it.
                for statement in &companion.create {
                    tx.batch_execute(statement).map_err(fail)?;
                }
                log::info!(target: "pgtenure::db", "{context}: created {} for {table}", companion.name);
                found = companion_of(&mut tx, context, companion, &quoted)?;
            }
            let ok = match (companion.kind, &found) {
                (CompanionKind::Index, Some((kind, on_table))) => kind == "i" && *on_table,
                (CompanionKind::Sequence, Some((kind, _))) => kind == "S",
                (CompanionKind::Table, Some((kind, _))) => kind == "r",
                (_, None) => false,
            };
            if !ok {
                let what = companion.kind.noun();
                let problem = match found {
                    Some(_) => format!(
                        "the name is taken by another relation, so the {what} was not created"
                    ),
                    None => format!(
                        "the {what} does not exist (dropped, or the table was made by hand)"
                    ),
                };
                return Err(Error::new(
                    ErrorKind::Database,
                    format!(
                        "{context} failed: {table} needs the {what} {} but {problem}; choose table \
                         names whose derived names are free, or create the {what} as sql/ describes",
                        companion.name
                    ),
                ));
            }
        }
        tx.commit().map_err(fail)?;
        if !exists {
            log::info!(target: "pgtenure::db", "{context}: created table {table}");
        }
        Ok(())
    }
}

/// What the relation a [`Companion`] names is (`pg_class.relkind`), and whether it is an index on
/// the table `quoted`; `None` when no relation has the name.
fn companion_of(
    tx: &mut postgres::Transaction<'_>,
    context: &str,
    companion: &Companion,
    quoted: &str,
) -> Result<Option<(String, bool)>> {
    let rows = tx
        .query_typed(
            COMPANION_SQL,
            &[(&companion.name, Type::TEXT), (&quoted, Type::TEXT)],
        )
        .map_err(|e| Error::from_postgres(context, e))?;
    rows.first()
        .map(|row| {
            let read = Read::server(row, context, &"pg_class");
            Ok((read.column("kind")?, read.column("on_table")?))
        })
        .transpose()
}

/// An index, sequence or table a table's statements rely on, by its quoted, schema-qualified name.
#[derive(Debug, Clone)]
pub(crate) struct Companion {
    pub(crate) name: String,
    pub(crate) kind: CompanionKind,
    /// The statements that make it when the table exists without it (a companion added in a later
    /// version); empty for those the table's own statements make.
    pub(crate) create: Vec<String>,
}

/// What a [`Companion`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompanionKind {
    /// An index on the table.
    Index,
    /// A sequence the statements draw tokens from.
    Sequence,
    /// A table the statements read and write beside it.
    Table,
}

impl CompanionKind {
    fn noun(self) -> &'static str {
        match self {
            CompanionKind::Index => "index",
            CompanionKind::Sequence => "sequence",
            CompanionKind::Table => "table",
        }
    }
}

impl Companion {
    pub(crate) fn index(name: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Index,
            create: Vec::new(),
        }
    }

    pub(crate) fn sequence(name: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Sequence,
            create: Vec::new(),
        }
    }

    /// The record of the last promotion `table`'s grants saw (`sql/schema/create_promotion.sql`),
    /// made with its one row when missing, so tables made before it get it from `create_table`.
    /// The row starts at the server's timeline when `fold` ([`Db::timeline_tokens`]).
    pub(crate) fn promotion(table: &TableName, fold: bool) -> Companion {
        let fold = if fold { "true" } else { "false" };
        Companion {
            name: table.derived("promotion"),
            kind: CompanionKind::Table,
            create: vec![
                render(CREATE_PROMOTION, table),
                render(SEED_PROMOTION, table).replace("{fold}", fold),
            ],
        }
    }
}
