//! Statements planned once per server connection, safely behind transaction poolers.
//!
//! Every operation's statement is a CTE whose planning costs several times its execution, so sending
//! it as an unnamed statement (planned on every call) made refusals and follower polls run at a
//! fraction of what PostgreSQL allows. Each [`Statement`] is instead prepared with SQL `PREPARE`
//! under a name derived from its content, `pgt_` and 32 hex digits of the SHA-256 of its parameter
//! types and text, and run as `EXECUTE pgt_…('value', …)` in one round trip, its values written as
//! literals from their wire encoding (text escaped by the driver's `escape_literal`). The `EXECUTE`
//! itself is sent as an unnamed statement, so rows come back in binary form as from any query.
//!
//! Why SQL-level names rather than the protocol's: the driver names protocol-level statements
//! `s0, s1, …` per process, so behind a transaction pooler that does not track them (PgBouncer
//! before 1.21, or later ones with `max_prepared_statements = 0`) a `Bind` could reach another
//! client's statement of the same name on a shared server connection. A content-addressed name
//! means the same statement wherever it exists, whoever prepared it. A server connection that lacks
//! it answers 26000 before anything ran; one that already has it (prepared by another client behind
//! the pooler) answers 42P05 to `PREPARE`. Either way nothing ran, and the statement is prepared or
//! executed again, at most [`MAX_EXECUTES`] times in all before it is sent unprepared for that call.
//!
//! Which statements a pooled connection has prepared is remembered in its r2d2 extensions, so a
//! direct connection pays one extra round trip (`PREPARE`) the first time it runs each statement;
//! behind a pooler, a server connection that lacks one costs two more (the 26000, then `PREPARE`).

mod literal;

use std::collections::HashSet;
use std::fmt::Write as _;

use bytes::BytesMut;
use postgres::error::SqlState;
use postgres::types::{IsNull, ToSql, Type};
use postgres::Row;
use sha2::{Digest, Sha256};

use self::literal::{literal, renderable};
use crate::db::conn::Conn;

/// How many `EXECUTE`s one call tries before it sends its statement unprepared (a pooler that keeps
/// moving the session between server connections that lack it).
const MAX_EXECUTES: usize = 3;

/// A bind value, typed by its [`Statement`].
pub(crate) type Value<'a> = &'a (dyn ToSql + Sync);

/// One of the crate's statements with its tables substituted, its parameter types, and the name it
/// is prepared under.
#[derive(Debug)]
pub(crate) struct Statement {
    text: String,
    types: Vec<Type>,
    /// `pgt_` and 32 hex digits of the SHA-256 of the types and the text.
    name: String,
    /// `PREPARE name (types) AS text`, or `None` when a parameter type cannot be written as a
    /// literal (then the statement is always sent unprepared).
    prepare: Option<String>,
}

impl Statement {
    /// `text` with `$1 … $n` typed by `types`.
    pub(crate) fn new(text: String, types: &[Type]) -> Statement {
        debug_assert_eq!(
            highest_parameter(&text),
            types.len(),
            "parameter types do not match the statement:\n{text}"
        );
        let mut hash = Sha256::new();
        for ty in types {
            hash.update(ty.oid().to_be_bytes());
        }
        hash.update([0]);
        hash.update(text.as_bytes());
        let digest = hash.finalize();
        let mut name = String::from("pgt_");
        for byte in &digest[..16] {
            let _ = write!(name, "{byte:02x}");
        }
        let prepare = types.iter().all(renderable).then(|| {
            let list: Vec<String> = types
                .iter()
                .map(|ty| format!("pg_catalog.{}", ty.name()))
                .collect();
            if list.is_empty() {
                format!("PREPARE {name} AS {text}")
            } else {
                format!("PREPARE {name} ({}) AS {text}", list.join(", "))
            }
        });
        Statement {
            text,
            types: types.to_vec(),
            name,
            prepare,
        }
    }

    /// The statement as sent unprepared, with `$1 … $n`.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The name it is prepared under (unique to its text and types).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Runs the statement on `conn` in one round trip in steady state: `EXECUTE` of the prepared
    /// statement when `prepared`, else the statement itself, unnamed (planned for this call only).
    pub(crate) fn query(
        &self,
        conn: &mut Conn,
        prepared: bool,
        values: &[Value<'_>],
    ) -> Result<Vec<Row>, Failure> {
        debug_assert_eq!(values.len(), self.types.len(), "{}", self.name);
        let execute = match (&self.prepare, prepared) {
            (Some(prepare), true) => self.execute(values).map(|execute| (prepare, execute)),
            _ => None,
        };
        let Some((prepare, execute)) = execute else {
            return self.unprepared(conn, values);
        };
        let mut replanned = false;
        for _ in 0..MAX_EXECUTES {
            self.prepare_with(conn, prepare)?;
            match conn.query_typed(&execute, &[]) {
                Ok(rows) => return Ok(rows),
                // Not prepared on this server connection (a pooler moved the session, or the
                // session was reset): nothing ran.
                Err(e) if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                    log::debug!(target: "pgtenure::db", "statement {} was not prepared on this server connection; preparing it", self.name);
                }
                // The cached plan cannot be used any more (a table's columns changed type, or the
                // table was dropped and created again, while this connection kept the statement):
                // it was refused before it ran. Prepare it afresh, once.
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) && !replanned => {
                    log::info!(target: "pgtenure::db", "statement {} must be prepared again: {e}", self.name);
                    replanned = true;
                    let _ = conn.batch_execute(&format!("DEALLOCATE {}", self.name));
                }
                // Refused again: behind a pooler the new `PREPARE` may have reached another server
                // connection that still holds the old plan, or the server refuses something the
                // statement itself uses (a WAL function on Aurora). Nothing ran; sent unprepared
                // it is planned for this call only, so only the latter fails again, and that
                // failure is the one reported.
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => {
                    log::info!(target: "pgtenure::db", "statement {} was refused again after being prepared afresh ({e}); sending it unprepared", self.name);
                    remember(conn, &self.name, false);
                    return self.unprepared(conn, values);
                }
                Err(e) => return Err(e.into()),
            }
            remember(conn, &self.name, false);
        }
        log::debug!(target: "pgtenure::db", "statement {} is missing on every server connection tried; sending it unprepared", self.name);
        self.unprepared(conn, values)
    }

    /// Prepares the statement on `conn` unless it is known to be prepared there (or `prepared` is
    /// off), without running it. A lease runs this before handing out its cancel key: a cancel
    /// that reaches a session between two statements is dropped, so the key must cover only the
    /// statement that can block.
    pub(crate) fn prepare(&self, conn: &mut Conn, prepared: bool) -> Result<(), Failure> {
        match &self.prepare {
            Some(prepare) if prepared => self.prepare_with(conn, prepare),
            _ => Ok(()),
        }
    }

    fn prepare_with(&self, conn: &mut Conn, prepare: &str) -> Result<(), Failure> {
        let known = conn
            .extensions()
            .get::<Prepared>()
            .is_some_and(|p| p.0.contains(&self.name));
        if known {
            return Ok(());
        }
        match conn.batch_execute(prepare) {
            Ok(()) => {}
            // This server connection has it already (behind a pooler: prepared by another client,
            // or by this one on a connection it was moved from).
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {}
            Err(error) => {
                return Err(Failure {
                    error,
                    before_sending: true,
                    cancelled: None,
                })
            }
        }
        remember(conn, &self.name, true);
        Ok(())
    }

    /// The statement itself, planned for this call.
    fn unprepared(&self, conn: &mut Conn, values: &[Value<'_>]) -> Result<Vec<Row>, Failure> {
        let params: Vec<(Value<'_>, Type)> = values
            .iter()
            .zip(&self.types)
            .map(|(value, ty)| (*value, ty.clone()))
            .collect();
        conn.query_typed(&self.text, &params).map_err(Failure::from)
    }

    /// `EXECUTE name('value', …)`, or `None` when a value cannot be written as a literal (a NUL
    /// byte in text, a type it does not know): then the call is sent unprepared, and the server or
    /// the driver reports what is wrong with the value.
    fn execute(&self, values: &[Value<'_>]) -> Option<String> {
        let mut sql = String::with_capacity(self.name.len() + 16 + 24 * values.len());
        sql.push_str("EXECUTE ");
        sql.push_str(&self.name);
        if values.is_empty() {
            return Some(sql);
        }
        let mut buf = BytesMut::new();
        for (i, (value, ty)) in values.iter().zip(&self.types).enumerate() {
            sql.push_str(if i == 0 { "(" } else { ", " });
            buf.clear();
            match value.to_sql_checked(ty, &mut buf).ok()? {
                IsNull::Yes => sql.push_str("NULL"),
                IsNull::No => sql.push_str(&literal(ty, &buf)?),
            }
        }
        sql.push(')');
        Some(sql)
    }
}

/// Why a statement failed on one connection.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: postgres::Error,
    /// It failed while being prepared: the operation's statement itself was never sent.
    pub(crate) before_sending: bool,
    /// pgtenure itself cancelled the statement, and why (a lease's deadline watcher sent the
    /// connection's cancel request): a 57014 then is its own doing, not the server's timeout.
    pub(crate) cancelled: Option<&'static str>,
}

impl From<postgres::Error> for Failure {
    fn from(error: postgres::Error) -> Failure {
        Failure {
            error,
            before_sending: false,
            cancelled: None,
        }
    }
}

/// The statements prepared on one pooled connection, kept in its r2d2 extensions.
struct Prepared(HashSet<String>);

fn remember(conn: &mut Conn, name: &str, prepared: bool) {
    let extensions = conn.extensions_mut();
    if extensions.get::<Prepared>().is_none() {
        extensions.insert(Prepared(HashSet::new()));
    }
    if let Some(Prepared(names)) = extensions.get_mut::<Prepared>() {
        if prepared {
            names.insert(name.to_owned());
        } else {
            names.remove(name);
        }
    }
}

/// The highest `$n` in `text` (comments included: they list the parameters).
fn highest_parameter(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut highest = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'$' {
            let digits: String = bytes[i + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .map(|d| *d as char)
                .collect();
            highest = highest.max(digits.parse().unwrap_or(0));
        }
    }
    highest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_content_addressed_by_text_and_types() {
        let a = Statement::new("SELECT $1".into(), &[Type::TEXT]);
        let same = Statement::new("SELECT $1".into(), &[Type::TEXT]);
        let other_type = Statement::new("SELECT $1".into(), &[Type::INT8]);
        let other_text = Statement::new("SELECT $1 ".into(), &[Type::TEXT]);
        assert_eq!(a.name(), same.name());
        assert_ne!(a.name(), other_type.name());
        assert_ne!(a.name(), other_text.name());
        assert!(a.name().starts_with("pgt_") && a.name().len() == 36);
        assert!(a.name().len() <= 63, "PostgreSQL truncates longer names");
        assert_eq!(
            a.prepare.as_deref(),
            Some(format!("PREPARE {} (pg_catalog.text) AS SELECT $1", a.name()).as_str())
        );
    }

    #[test]
    fn statements_without_literal_types_are_never_prepared() {
        let s = Statement::new("SELECT $1".into(), &[Type::UUID]);
        assert!(s.prepare.is_none());
        assert_eq!(highest_parameter("SELECT $12, $3 -- $1"), 12);
        assert_eq!(highest_parameter("SELECT 1"), 0);
    }
}
