//! Statements planned once per server connection, in the way the connection's statement mode
//! decided (see [`StatementMode`](crate::StatementMode)): protocol-level, SQL-level or unprepared.
//!
//! Every operation's statement is a CTE whose planning costs several times its execution, so sending
//! it as an unnamed statement (planned on every call) runs refusals and follower polls at a fraction
//! of what PostgreSQL allows. Two ways plan it once per server connection:
//!
//! - **Protocol-level**: the driver's `prepare_typed` once per pooled connection, the statement kept
//!   in the connection's [`Cache`], then `Bind`/`Execute` in one round trip. The driver names them
//!   `s0, s1, …` from a counter of its process, so behind a pooler that does not track them a
//!   `Bind` could reach another process's statement of the same name: used only where the mode
//!   allows. A session that lost them (`DEALLOCATE ALL`, `DISCARD ALL`) answers 26000 before
//!   anything ran; the backend's process id, asked then, tells a reset session (the same backend:
//!   prepared again) from a pooler that moved it (another backend: the connection, and its `Db`,
//!   use SQL-level statements from then on).
//! - **SQL-level**: `PREPARE pgt_…` under a name derived from its content, `pgt_` and 32 hex digits
//!   of the SHA-256 of its parameter types and text, and `EXECUTE pgt_…('value', …)` in one round
//!   trip, its values written as literals from their wire encoding (text escaped by the driver's
//!   `escape_literal`); the `EXECUTE` itself is sent as an unnamed statement, so rows come back in
//!   binary form as from any query. A content-addressed name means the same statement wherever it
//!   exists, whoever prepared it: safe behind any pooler. A server connection that lacks it answers
//!   26000 before anything ran; one that already has it (prepared by another client behind the
//!   pooler) answers 42P05 to `PREPARE`. Either way nothing ran, and the statement is prepared or
//!   executed again, at most [`MAX_EXECUTES`] times in all before it is sent unprepared for that call.
//!
//! A direct connection pays one extra round trip the first time it runs each statement (the
//! prepare); behind a pooler, a server connection that lacks one costs two more (the 26000, then
//! `PREPARE`). A changed result type (0A000: a table's column changed type) is prepared afresh once.

mod literal;
mod params;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::OnceLock;

use bytes::BytesMut;
use postgres::error::SqlState;
use postgres::types::{IsNull, Type};
use postgres::{Client, Row, SimpleQueryMessage};
use sha2::{Digest, Sha256};

use self::literal::{literal, renderable};
pub(crate) use self::params::{Params, Value};
use crate::db::{Seen, StatementMode, Way};

/// How many `EXECUTE`s one call tries before it sends its statement unprepared (a pooler that keeps
/// moving the session between server connections that lack it).
const MAX_EXECUTES: usize = 3;

/// One of the crate's statements with its tables substituted. Its parameter types are those of
/// the operation that runs it (a [`Params`] tuple), known at its first use, and so is the name it is
/// prepared under.
#[derive(Debug)]
pub(crate) struct Statement {
    text: String,
    typed: OnceLock<Typed>,
}

/// What a statement's parameter types decide.
#[derive(Debug)]
struct Typed {
    types: &'static [Type],
    /// `pgt_` and 32 hex digits of the SHA-256 of the types and the text.
    name: String,
    /// `PREPARE name (types) AS text`, or `None` when a parameter type cannot be written as a
    /// literal (then the statement is always sent unprepared).
    prepare: Option<String>,
}

impl Typed {
    fn new(text: &str, types: &'static [Type]) -> Typed {
        debug_assert_eq!(
            highest_parameter(text),
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
        Typed {
            types,
            name,
            prepare,
        }
    }
}

/// A statement bound to its parameters for one call.
struct Call<'s, 'v> {
    text: &'s str,
    typed: &'s Typed,
    values: Vec<Value<'v>>,
}

impl Statement {
    /// `text`, whose `$1 … $n` are typed by the operation that runs it.
    pub(crate) fn new(text: String) -> Statement {
        Statement {
            text,
            typed: OnceLock::new(),
        }
    }

    /// The statement as sent unprepared, with `$1 … $n`.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// What `P`'s types decide for this statement (every operation runs it with the same types).
    fn typed<P: Params>(&self) -> &Typed {
        let typed = self.typed.get_or_init(|| Typed::new(&self.text, P::TYPES));
        debug_assert_eq!(typed.types, P::TYPES, "{}", self.text);
        typed
    }

    /// The name it is prepared under with `P`'s types (unique to its text and types).
    pub(crate) fn name<P: Params>(&self) -> &str {
        &self.typed::<P>().name
    }

    /// Runs the statement with `params` on `client` in one round trip in steady state, in `way`:
    /// with the protocol-level statement kept in `cache`, as `EXECUTE` of the SQL-level one, or
    /// unprepared (planned for this call only).
    pub(crate) fn query<P: Params>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        way: Way,
        params: &P,
    ) -> Result<Vec<Row>, Failure> {
        let call = Call {
            text: &self.text,
            typed: self.typed::<P>(),
            values: params.values(),
        };
        let result = match way {
            Way::Protocol => call.protocol(client, cache),
            Way::Sql => call.sql_level(client, cache),
            Way::Unprepared => call.unprepared(client),
        };
        cache.end_call();
        result
    }

    /// Prepares the statement with `P`'s types on `client` in `way` unless `cache` says it is
    /// prepared there, without running it. A lease runs this before handing out its cancel key: a
    /// cancel that reaches a session between two statements is dropped, so the key must cover only
    /// the statement that can block.
    pub(crate) fn prepare<P: Params>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        way: Way,
    ) -> Result<(), Failure> {
        let call = Call {
            text: &self.text,
            typed: self.typed::<P>(),
            values: Vec::new(),
        };
        match way {
            Way::Protocol => call.protocol_statement(client, cache).map(drop),
            Way::Sql => match &call.typed.prepare {
                Some(prepare) => call.prepare_sql(client, cache, prepare),
                None => Ok(()),
            },
            Way::Unprepared => Ok(()),
        }
    }
}

impl Call<'_, '_> {
    /// The protocol-level path: `Bind`/`Execute` of the statement prepared on this connection.
    fn protocol(&self, client: &mut Client, cache: &mut Cache) -> Result<Vec<Row>, Failure> {
        let mut replanned = false;
        for _ in 0..MAX_EXECUTES {
            let Some(statement) = self.protocol_statement(client, cache)? else {
                // A pooler was found while preparing it.
                return self.sql_level(client, cache);
            };
            match client.query(&statement, &self.values) {
                Ok(rows) => return Ok(rows),
                // Not prepared in this session any more: nothing ran. A reset session (the same
                // backend) prepares it again; another backend proves a pooler in between.
                Err(e) if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                    if !same_backend(client, cache)? {
                        cache.found_pooler();
                        return self.sql_level(client, cache);
                    }
                    log::debug!(target: "pgtenure::db", "the session lost its prepared statements (DEALLOCATE ALL or DISCARD ALL); preparing {} again", self.typed.name);
                    cache.lost_protocol();
                    cache.missed = true;
                }
                // The cached plan cannot be used any more (a column changed type): refused before
                // it ran. Prepared afresh, once; refused again, it is sent unprepared.
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) && !replanned => {
                    log::info!(target: "pgtenure::db", "statement {} must be prepared again: {e}", self.typed.name);
                    replanned = true;
                    cache.protocol.remove(&self.typed.name);
                }
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => {
                    log::info!(target: "pgtenure::db", "statement {} was refused again after being prepared afresh ({e}); sending it unprepared", self.typed.name);
                    return self.unprepared(client);
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.unprepared(client)
    }

    /// The protocol-level statement of this connection, prepared now if it is not yet; `None` when
    /// preparing it found a pooler (the name is taken in the session: only another process's
    /// statement can hold a name the driver gave out once in this one).
    fn protocol_statement(
        &self,
        client: &mut Client,
        cache: &mut Cache,
    ) -> Result<Option<postgres::Statement>, Failure> {
        if cache.way == Some(Way::Sql) {
            return Ok(None);
        }
        if let Some(statement) = cache.protocol.get(&self.typed.name) {
            return Ok(Some(statement.clone()));
        }
        match client.prepare_typed(self.text, self.typed.types) {
            Ok(statement) => {
                cache
                    .protocol
                    .insert(self.typed.name.clone(), statement.clone());
                Ok(Some(statement))
            }
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {
                cache.found_pooler();
                Ok(None)
            }
            Err(error) => Err(Failure::before_sending(error)),
        }
    }

    /// The SQL-level path: `EXECUTE` of the statement prepared under its content's name.
    fn sql_level(&self, client: &mut Client, cache: &mut Cache) -> Result<Vec<Row>, Failure> {
        let execute = self
            .typed
            .prepare
            .as_ref()
            .and_then(|prepare| self.execute().map(|execute| (prepare, execute)));
        let Some((prepare, execute)) = execute else {
            return self.unprepared(client);
        };
        let mut replanned = false;
        for _ in 0..MAX_EXECUTES {
            self.prepare_sql(client, cache, prepare)?;
            match client.query_typed(&execute, &[]) {
                Ok(rows) => return Ok(rows),
                // Not prepared on this server connection (a pooler moved the session, or the
                // session was reset): nothing ran.
                Err(e) if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => {
                    log::debug!(target: "pgtenure::db", "statement {} was not prepared on this server connection; preparing it", self.typed.name);
                    cache.missed = true;
                }
                // The cached plan cannot be used any more (a table's columns changed type, or the
                // table was dropped and created again, while this connection kept the statement):
                // it was refused before it ran. Prepare it afresh, once.
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) && !replanned => {
                    log::info!(target: "pgtenure::db", "statement {} must be prepared again: {e}", self.typed.name);
                    replanned = true;
                    let _ = client.batch_execute(&format!("DEALLOCATE {}", self.typed.name));
                }
                // Refused again: behind a pooler the new `PREPARE` may have reached another server
                // connection that still holds the old plan, or the server refuses something the
                // statement itself uses (a WAL function on Aurora). Nothing ran; sent unprepared
                // it is planned for this call only, so only the latter fails again, and that
                // failure is the one reported.
                Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => {
                    log::info!(target: "pgtenure::db", "statement {} was refused again after being prepared afresh ({e}); sending it unprepared", self.typed.name);
                    cache.sql.remove(&self.typed.name);
                    return self.unprepared(client);
                }
                Err(e) => return Err(e.into()),
            }
            cache.sql.remove(&self.typed.name);
        }
        log::debug!(target: "pgtenure::db", "statement {} is missing on every server connection tried; sending it unprepared", self.typed.name);
        self.unprepared(client)
    }

    fn prepare_sql(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        prepare: &str,
    ) -> Result<(), Failure> {
        if cache.sql.contains(&self.typed.name) {
            return Ok(());
        }
        match client.batch_execute(prepare) {
            Ok(()) => {}
            // This server connection has it already (behind a pooler: prepared by another client,
            // or by this one on a connection it was moved from).
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {}
            Err(error) => return Err(Failure::before_sending(error)),
        }
        cache.sql.insert(self.typed.name.clone());
        Ok(())
    }

    /// The statement itself, planned for this call.
    fn unprepared(&self, client: &mut Client) -> Result<Vec<Row>, Failure> {
        client
            .query_typed(self.text, &typed(&self.values, self.typed.types))
            .map_err(Failure::from)
    }

    /// `EXECUTE name('value', …)`, or `None` when a value cannot be written as a literal (a NUL
    /// byte in text, a type it does not know): then the call is sent unprepared, and the server or
    /// the driver reports what is wrong with the value.
    fn execute(&self) -> Option<String> {
        let name = &self.typed.name;
        let mut sql = String::with_capacity(name.len() + 16 + 24 * self.values.len());
        sql.push_str("EXECUTE ");
        sql.push_str(name);
        if self.values.is_empty() {
            return Some(sql);
        }
        let mut buf = BytesMut::new();
        for (i, (value, ty)) in self.values.iter().zip(self.typed.types).enumerate() {
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

/// Each value beside its type, as the driver's unprepared `query_typed` takes them.
fn typed<'a>(values: &[Value<'a>], types: &[Type]) -> Vec<(Value<'a>, Type)> {
    values
        .iter()
        .zip(types)
        .map(|(value, ty)| (*value, ty.clone()))
        .collect()
}

/// Whether the session still runs on the backend the connection was first seen on. Asked after a
/// 26000 (nothing ran): an unknown backend counts as another.
fn same_backend(client: &mut Client, cache: &Cache) -> Result<bool, Failure> {
    let Some(pid) = cache.pid else {
        return Ok(false);
    };
    let answer = client
        .simple_query("SELECT pg_backend_pid()")
        .map_err(Failure::before_sending)?;
    let now = answer.iter().find_map(|message| match message {
        // try_get: an answer without the column tells nothing, never panics.
        SimpleQueryMessage::Row(row) => row
            .try_get(0)
            .ok()
            .flatten()
            .and_then(|v| v.parse::<i32>().ok()),
        _ => None,
    });
    Ok(now == Some(pid))
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

impl Failure {
    /// A failure before the operation's own statement was sent (preparing it, or asking the
    /// session a question first): nothing of the operation ran.
    pub(crate) fn before_sending(error: postgres::Error) -> Failure {
        Failure {
            error,
            before_sending: true,
            cancelled: None,
        }
    }
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

/// What pgtenure keeps with each pooled connection (in its r2d2 extensions): how it sends
/// statements, and those prepared on it.
#[derive(Default)]
pub(crate) struct Cache {
    /// The mode the way was decided under: `None` until the first statement.
    pub(crate) mode: Option<StatementMode>,
    /// The way in force (`Sql` once a pooler was found on this connection).
    pub(crate) way: Option<Way>,
    /// The backend the session was first seen on, when it was asked.
    pub(crate) pid: Option<i32>,
    /// What the session said of the server when it was asked (once per connection).
    pub(crate) seen: Option<Seen>,
    /// Set when this connection found a pooler; the `Db` takes it up.
    pub(crate) pooler_found: bool,
    /// This call found its prepared statement gone from the server connection (26000).
    missed: bool,
    /// How many calls in a row found it gone.
    misses: u32,
    /// Prepared statements keep vanishing from this connection's server connections (a pooler
    /// that resets them after every transaction): its statements are sent unprepared for good.
    pub(crate) vanishing: bool,
    /// Set when this connection found that; the `Db` takes it up.
    pub(crate) vanishing_found: bool,
    /// The SQL-level statements prepared on the connection, by name.
    sql: HashSet<String>,
    /// The protocol-level statements prepared on the connection, by pgtenure's name.
    protocol: HashMap<String, postgres::Statement>,
    /// Protocol-level statements a reset session lost: dropped with the connection (dropping one
    /// sends a `Close`, which a reset session does not need), or in a batch once there are many.
    lost: Vec<postgres::Statement>,
}

/// How many lost protocol-level statements a connection keeps before dropping them.
const MAX_LOST: usize = 1024;

/// How many calls in a row that find their prepared statement gone make a connection send its
/// statements unprepared: each such call paid up to seven round trips instead of one.
const MISSES_BEFORE_UNPREPARED: u32 = 3;

impl Cache {
    /// A call ended: it found its statement gone, or not.
    fn end_call(&mut self) {
        if !std::mem::take(&mut self.missed) {
            self.misses = 0;
            return;
        }
        self.misses += 1;
        if self.misses >= MISSES_BEFORE_UNPREPARED && !self.vanishing {
            self.vanishing = true;
            self.vanishing_found = true;
            self.way = Some(Way::Unprepared);
        }
    }

    /// The session was reset: its protocol-level statements are gone.
    fn lost_protocol(&mut self) {
        self.lost.extend(self.protocol.drain().map(|(_, s)| s));
        if self.lost.len() > MAX_LOST {
            self.lost.clear();
        }
    }

    /// A pooler is in between: SQL-level statements from now on. The protocol-level ones are
    /// forgotten without a `Close`, which could close another client's statement of that name.
    pub(crate) fn found_pooler(&mut self) {
        self.pooler_found = true;
        self.way = Some(Way::Sql);
        for (_, statement) in self.protocol.drain() {
            std::mem::forget(statement);
        }
        for statement in self.lost.drain(..) {
            std::mem::forget(statement);
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
        let a = Typed::new("SELECT $1", &[Type::TEXT]);
        let same = Typed::new("SELECT $1", &[Type::TEXT]);
        let other_type = Typed::new("SELECT $1", &[Type::INT8]);
        let other_text = Typed::new("SELECT $1 ", &[Type::TEXT]);
        assert_eq!(a.name, same.name);
        assert_ne!(a.name, other_type.name);
        assert_ne!(a.name, other_text.name);
        assert!(a.name.starts_with("pgt_") && a.name.len() == 36);
        assert!(a.name.len() <= 63, "PostgreSQL truncates longer names");
        assert_eq!(
            a.prepare.as_deref(),
            Some(format!("PREPARE {} (pg_catalog.text) AS SELECT $1", a.name).as_str())
        );
    }

    #[test]
    fn a_statement_is_typed_by_the_operation_that_runs_it() {
        let s = Statement::new("SELECT $1, $2".into());
        assert_eq!(
            s.name::<(&str, i64)>(),
            Typed::new("SELECT $1, $2", &[Type::TEXT, Type::INT8]).name
        );
    }

    #[test]
    fn statements_without_literal_types_are_never_prepared() {
        let s = Typed::new("SELECT $1", &[Type::UUID]);
        assert!(s.prepare.is_none());
        assert_eq!(highest_parameter("SELECT $12, $3 -- $1"), 12);
        assert_eq!(highest_parameter("SELECT 1"), 0);
    }
}
