//! Fences as values: the statement and its parameters, for any driver.
//!
//! A fence guards the holder's own write, so it runs in the holder's transaction on the holder's
//! connection, whatever the driver. Every held thing gives its fence as a [`Fence`]: the statement
//! text (tables rendered, parameters `$1 … $n`) and the parameters as owned, typed values. Run it
//! inside the transaction that makes the protected write, before the write:
//!
//! - it returns **one row** when the fence holds: the row is this tenure's (key, owner or holder,
//!   token or term) and live by `clock_timestamp()`, the clock at that moment, not the start of the
//!   transaction;
//! - it returns **no row** when it does not: the tenure ended, lapsed, was taken or released;
//! - it locks the row `FOR SHARE` until the transaction ends, so a takeover (another holder's
//!   acquire, claim or election, a force release) waits until the write has committed or rolled
//!   back; a paused, stale holder can never commit after another tenure began.
//!
//! Make the write only when it returned a row, and commit; otherwise roll back. Outside a
//! transaction (autocommit) the lock ends with the statement and the fence protects nothing
//! (`check_diesel` refuses a fence that held there). Keep
//! fenced transactions short: the lock also makes the holder's own renewal wait.
//!
//! | Held thing | Give it with | Parameters |
//! |---|---|---|
//! | a managed [`Lease`](crate::leases::Lease) | [`Lease::fence_statement`](crate::leases::Lease::fence_statement) | `$1` key `text`, `$2` owner `text`, `$3` token `bigint` |
//! | a raw tenure ([`Grant`](crate::leases::Grant)) | [`Leases::fence_statement`](crate::leases::Leases::fence_statement) | the same |
//! | a [`TickClaim`](crate::tick_claims::TickClaim) | [`TickClaim::fence_statement`](crate::tick_claims::TickClaim::fence_statement) | `$1` job id `text`, `$2` owner `text`, `$3` token `bigint` |
//! | a scheduled [`Run`](crate::schedule::Run) | [`Run::fence_statement`](crate::schedule::Run::fence_statement) | the same (its tick claim) |
//! | a leadership term | [`Leadership::fence_statement`](crate::elector::Leadership::fence_statement), [`Elector::fence_statement`](crate::elector::Elector::fence_statement) | `$1` fleet name `text`, `$2` holder `text`, `$3` term `bigint` |
//! | a unit | [`Leaser::fence_statement`](crate::membership::Leaser::fence_statement) | `$1` process id `text` (cast to `uuid` in the statement), `$2` tenant `text`, `$3` shard `integer`, `$4` token `bigint` |
//!
//! Each held thing also runs its fence itself on a `postgres` transaction (`lease.fence(&mut tx)`,
//! `claim.fence(&mut tx)`, …), which is [`Fence::check`] of that value. With the feature `diesel`,
//! `Fence::check_diesel` runs it on a `diesel::PgConnection` inside the caller's
//! `conn.transaction(|conn| …)`. Any other driver or language runs [`Fence::sql`] with
//! [`Fence::params`] bound in order: `docs/fencing.md` in the repository shows psql and Python.
//!
//! A value is pinned to the tenure it was taken from: taken when work begins, it keeps refusing
//! after that tenure ended, even if the same process holds the thing again under a newer token or
//! term. The statement texts are stable within a release series; the CHANGELOG says when one
//! changes.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use pgtenure::Db;
//! use pgtenure::leases::Leases;
//!
//! let db = Db::connect("postgres://postgres@localhost/app")?;
//! let leases = Leases::new(&db);
//! if let Some(lease) = leases.acquire("invoice-export", Duration::from_secs(30))? {
//!     let fence = lease.fence_statement();
//!     // Hand these to another driver, another process, another language:
//!     println!("{}", fence.sql());
//!     for (i, param) in fence.params().iter().enumerate() {
//!         println!("${} {} = {}", i + 1, param.type_name(), param);
//!     }
//!     // Or run it here, in the transaction of the protected write:
//!     let mut conn = db.connection()?;
//!     let mut tx = conn.transaction()?;
//!     if fence.check(&mut tx)? {
//!         tx.execute("UPDATE invoices SET exported = true WHERE exported = false", &[])?;
//!         tx.commit()?;
//!     }
//!     lease.release()?;
//! }
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use postgres::types::{ToSql, Type};

use crate::error::{Error, Result};

/// A fence as a value: the statement and its parameters, run inside the caller's transaction
/// before a protected write. See the [module docs](self) for the contract.
///
/// Cheap to clone; `Send` and `Sync`. `Display` shows the statement followed by its parameters in
/// SQL comments (`-- $1 text = "invoice-export"`), so it stays valid SQL when pasted.
#[derive(Clone, PartialEq, Eq)]
pub struct Fence {
    sql: Arc<str>,
    params: Vec<Param>,
    /// What the fence guards, for error messages ("fence lease").
    context: &'static str,
}

/// One parameter of a [`Fence`], in the type the statement binds it as.
///
/// `Display` writes the value in PostgreSQL's text form, what a driver that sends parameters as
/// text (libpq's `PQexecParams`, psql variables) takes.
///
/// New types may be added in minor releases, so a `match` needs a wildcard arm.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Param {
    /// A `text` parameter.
    Text(String),
    /// A `bigint` (`int8`) parameter: a token or a term.
    Int8(i64),
    /// An `integer` (`int4`) parameter: a unit's shard.
    Int4(i32),
}

impl Param {
    /// The PostgreSQL type it is bound as: `"text"`, `"bigint"` or `"integer"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Param::Text(_) => "text",
            Param::Int8(_) => "bigint",
            Param::Int4(_) => "integer",
        }
    }

    /// The value of a `text` parameter.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Param::Text(text) => Some(text),
            _ => None,
        }
    }

    /// The value of a `bigint` parameter.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Param::Int8(value) => Some(*value),
            _ => None,
        }
    }

    /// The value of an `integer` parameter.
    pub fn as_i32(&self) -> Option<i32> {
        match self {
            Param::Int4(value) => Some(*value),
            _ => None,
        }
    }

    /// The value and the driver type it is bound as.
    fn bind(&self) -> (&(dyn ToSql + Sync), Type) {
        match self {
            Param::Text(text) => (text, Type::TEXT),
            Param::Int8(value) => (value, Type::INT8),
            Param::Int4(value) => (value, Type::INT4),
        }
    }
}

impl fmt::Display for Param {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Param::Text(text) => f.write_str(text),
            Param::Int8(value) => write!(f, "{value}"),
            Param::Int4(value) => write!(f, "{value}"),
        }
    }
}

impl From<&str> for Param {
    fn from(text: &str) -> Param {
        Param::Text(text.to_owned())
    }
}

impl From<i64> for Param {
    fn from(value: i64) -> Param {
        Param::Int8(value)
    }
}

impl From<i32> for Param {
    fn from(value: i32) -> Param {
        Param::Int4(value)
    }
}

impl Fence {
    pub(crate) fn new(context: &'static str, sql: Arc<str>, params: Vec<Param>) -> Fence {
        Fence {
            sql,
            params,
            context,
        }
    }

    /// The statement: tables rendered (double-quoted), parameters `$1 … $n`, no comments. It is the
    /// text pgtenure itself sends for this fence.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters `$1 … $n`, in order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// Runs the fence inside `tx`: `true` when it holds (the row is then locked `FOR SHARE` until
    /// `tx` ends), `false` when it does not. Make the protected write only on `true`. One
    /// statement, sent unprepared (a prepared statement missing on a pooled server connection would
    /// abort the transaction); it can wait for a row lock held by a takeover in progress.
    ///
    /// # Errors
    ///
    /// A database or connection error, with the server's reason and SQLSTATE; the transaction is
    /// then aborted.
    pub fn check(&self, tx: &mut postgres::Transaction<'_>) -> Result<bool> {
        let params: Vec<(&(dyn ToSql + Sync), Type)> =
            self.params.iter().map(Param::bind).collect();
        let rows = tx
            .query_typed(&self.sql, &params)
            .map_err(|e| Error::from_postgres(self.context, e))?;
        Ok(!rows.is_empty())
    }

    /// Runs the fence on a Diesel connection, inside the caller's transaction
    /// (`conn.transaction(|conn| …)`): `true` when it holds (the row is then locked `FOR SHARE`
    /// until that transaction ends), `false` when it does not. Make the protected write only on
    /// `true`. Outside a transaction the lock would end with the statement and the fence protect
    /// nothing: a fence that holds there is refused (one more statement asks the server whether a
    /// transaction is open; a refused fence needs none).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), pgtenure::Error> {
    /// # let db = pgtenure::Db::connect("postgres://postgres@localhost/app")?;
    /// # let leases = pgtenure::leases::Leases::new(&db);
    /// # let lease = leases.acquire("invoice-export", std::time::Duration::from_secs(30))?.unwrap();
    /// use diesel::{Connection, PgConnection, RunQueryDsl};
    ///
    /// let mut conn = PgConnection::establish("postgres://postgres@localhost/app")
    ///     .expect("a connection");
    /// let fence = lease.fence_statement();
    /// let written = conn.transaction(|conn| {
    ///     if !fence.check_diesel(conn)? {
    ///         return Ok(false); // not the holder any more: write nothing
    ///     }
    ///     diesel::sql_query("UPDATE invoices SET exported = true").execute(conn)?;
    ///     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(true)
    /// });
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) outside a transaction, when
    /// the fence held (its lock is already gone). A database or connection error, with the
    /// server's reason (Diesel 2.2 and 2.3 report no SQLSTATE); the transaction is then aborted.
    /// The Diesel error is the `source()`.
    #[cfg(feature = "diesel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "diesel")))]
    pub fn check_diesel(&self, conn: &mut diesel::PgConnection) -> Result<bool> {
        use diesel::sql_types::{BigInt, Integer, Text};
        use diesel::RunQueryDsl;

        let mut query = diesel::sql_query(&*self.sql).into_boxed::<diesel::pg::Pg>();
        for param in &self.params {
            query = match param {
                Param::Text(text) => query.bind::<Text, _>(text.clone()),
                Param::Int8(value) => query.bind::<BigInt, _>(*value),
                Param::Int4(value) => query.bind::<Integer, _>(*value),
            };
        }
        // The rows the statement returned (libpq's PQcmdTuples, which counts a SELECT's rows).
        let rows = query
            .execute(conn)
            .map_err(|e| Error::from_diesel(self.context, e))?;
        if rows == 0 {
            return Ok(false);
        }
        // Held: but outside a transaction its lock ended with the statement, and a `true` would
        // protect nothing. The server knows (Diesel's own depth misses a plain `BEGIN`): locking
        // the row gave the transaction an id, which a transaction of its own (autocommit) has
        // not.
        let outside = diesel::select(diesel::dsl::sql::<diesel::sql_types::Bool>(
            "txid_current_if_assigned() IS NULL",
        ))
        .get_result::<bool>(conn)
        .map_err(|e| Error::from_diesel(self.context, e))?;
        if outside {
            return Err(Error::invalid_input(format!(
                "{} outside a transaction: its row lock ended with the statement, so it protects                  no write; run check_diesel inside conn.transaction(|conn| ...), before the write",
                self.context
            )));
        }
        Ok(true)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sql)?;
        for (i, param) in self.params.iter().enumerate() {
            write!(f, "\n-- ${} {} = ", i + 1, param.type_name())?;
            match param {
                // Quoted and escaped: a newline in a key stays inside the comment.
                Param::Text(text) => write!(f, "{text:?}")?,
                other => write!(f, "{other}")?,
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fence")
            .field("sql", &self.sql)
            .field("params", &self.params)
            .finish()
    }
}

/// A fence statement as loaded from `sql/<module>/fence.sql`, tables rendered: without the comment
/// lines it starts with (they say why it is shaped so, for readers of the file) and the trailing
/// newline, so the text is the same wherever it is sent or shown.
pub(crate) fn statement_text(rendered: &str) -> Arc<str> {
    let body: Vec<&str> = rendered
        .lines()
        .skip_while(|line| line.trim_start().starts_with("--") || line.trim().is_empty())
        .collect();
    Arc::from(body.join("\n").trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new(
            "fence lease",
            statement_text("-- why\n-- $1 key\nSELECT 1\n  FROM \"t\"\n WHERE key = $1\n"),
            vec!["a\nb".into(), Param::Int8(7), Param::Int4(-3)],
        )
    }

    #[test]
    fn the_statement_loses_its_leading_comments_and_keeps_its_lines() {
        assert_eq!(fence().sql(), "SELECT 1\n  FROM \"t\"\n WHERE key = $1");
    }

    #[test]
    fn params_say_their_type_and_value() {
        let f = fence();
        let types: Vec<_> = f.params().iter().map(Param::type_name).collect();
        assert_eq!(types, ["text", "bigint", "integer"]);
        assert_eq!(f.params()[0].as_str(), Some("a\nb"));
        assert_eq!(f.params()[1].as_i64(), Some(7));
        assert_eq!(f.params()[2].as_i32(), Some(-3));
        assert_eq!(f.params()[1].as_str(), None);
        assert_eq!(f.params()[2].to_string(), "-3");
    }

    #[test]
    fn display_is_the_statement_with_its_parameters_in_comments() {
        assert_eq!(
            fence().to_string(),
            "SELECT 1\n  FROM \"t\"\n WHERE key = $1\n-- $1 text = \"a\\nb\"\n-- $2 bigint = 7\n\
             -- $3 integer = -3"
        );
    }
}
