//! One call of a statement in each of the three ways: protocol-level, SQL-level, unprepared.

use bytes::BytesMut;
use postgres::error::SqlState;
use postgres::types::{IsNull, Type};
use postgres::{Client, Row, SimpleQueryMessage};

use super::cache::Cache;
use super::failure::Failure;
use super::literal::literal;
use super::mode::Way;
use super::params::Value;
use super::typed::Typed;

/// How many `EXECUTE`s one call tries before it sends its statement unprepared (a pooler that keeps
/// moving the session between server connections that lack it).
const MAX_EXECUTES: usize = 3;

/// A statement bound to its parameters for one call.
pub(super) struct Call<'s, 'v> {
    pub(super) text: &'s str,
    pub(super) typed: &'s Typed,
    pub(super) values: &'v [Value<'v>],
}

impl Call<'_, '_> {
    /// The protocol-level path: `Bind`/`Execute` of the statement prepared on this connection.
    pub(super) fn protocol(
        &self,
        client: &mut Client,
        cache: &mut Cache,
    ) -> Result<Vec<Row>, Failure> {
        let mut replanned = false;
        for _ in 0..MAX_EXECUTES {
            // Borrowed from the cache for the call (no clone of the driver's statement per call),
            // in one lookup when it is prepared (a connection that found a pooler holds none).
            let result = match cache.protocol.get(&self.typed.key) {
                Some(statement) => client.query(statement, self.values),
                None => {
                    if !self.protocol_statement(client, cache)? {
                        // A pooler was found while preparing it.
                        return self.sql_level(client, cache);
                    }
                    match cache.protocol.get(&self.typed.key) {
                        Some(statement) => client.query(statement, self.values),
                        None => return self.unprepared(client),
                    }
                }
            };
            match result {
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
                    cache.protocol.remove(&self.typed.key);
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

    /// Prepares the protocol-level statement of this connection if it is not yet: whether it is
    /// there now; `false` when preparing it found a pooler (the name is taken in the session: only
    /// another process's statement can hold a name the driver gave out once in this one).
    pub(super) fn protocol_statement(
        &self,
        client: &mut Client,
        cache: &mut Cache,
    ) -> Result<bool, Failure> {
        if cache.way == Some(Way::Sql) {
            return Ok(false);
        }
        if cache.protocol.contains_key(&self.typed.key) {
            return Ok(true);
        }
        match client.prepare_typed(self.text, self.typed.types) {
            Ok(statement) => {
                cache.protocol.insert(self.typed.key, statement);
                Ok(true)
            }
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {
                cache.found_pooler();
                Ok(false)
            }
            Err(error) => Err(Failure::before_sending(error)),
        }
    }

    /// The SQL-level path: `EXECUTE` of the statement prepared under its content's name.
    pub(super) fn sql_level(
        &self,
        client: &mut Client,
        cache: &mut Cache,
    ) -> Result<Vec<Row>, Failure> {
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
                    cache.sql.remove(&self.typed.key);
                    return self.unprepared(client);
                }
                Err(e) => return Err(e.into()),
            }
            cache.sql.remove(&self.typed.key);
        }
        log::debug!(target: "pgtenure::db", "statement {} is missing on every server connection tried; sending it unprepared", self.typed.name);
        self.unprepared(client)
    }

    /// Prepares the SQL-level statement with `prepare` unless `cache` says it is prepared there.
    pub(super) fn prepare_sql(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        prepare: &str,
    ) -> Result<(), Failure> {
        if cache.sql.contains(&self.typed.key) {
            return Ok(());
        }
        match client.batch_execute(prepare) {
            Ok(()) => {}
            // This server connection has it already (behind a pooler: prepared by another client,
            // or by this one on a connection it was moved from).
            Err(e) if e.code() == Some(&SqlState::DUPLICATE_PSTATEMENT) => {}
            Err(error) => return Err(Failure::before_sending(error)),
        }
        cache.sql.insert(self.typed.key);
        Ok(())
    }

    /// The statement itself, planned for this call.
    pub(super) fn unprepared(&self, client: &mut Client) -> Result<Vec<Row>, Failure> {
        client
            .query_typed(self.text, &typed(self.values, self.typed.types))
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
