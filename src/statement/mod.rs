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

//!
//! The layer owns all of it: the modes ([`StatementMode`]) and the proof that a connection is
//! direct (`direct`), the way each connection gets (`sending`), what is kept with each connection
//! (`cache`), each call in its way (`send`), and the statements themselves, each typed by its
//! parameters ([`Statement<P>`]). It imports nothing of `db`: the pool, the retry loop and the
//! [`Db`](crate::Db) handle use it.

mod cache;
mod direct;
mod failure;
mod literal;
mod mode;
mod params;
mod send;
mod sending;
mod typed;

use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

use postgres::{Client, Row};

use self::send::Call;
use self::typed::Typed;

pub(crate) use self::cache::{ByKey, Cache};
pub(crate) use self::direct::{proven_direct, Targets};
pub(crate) use self::failure::Failure;
pub(crate) use self::mode::Way;
pub use self::mode::{StatementMode, StatementModes};
pub(crate) use self::params::{Param, Params, Value};
pub(crate) use self::sending::Sending;

/// One of the crate's statements with its tables substituted, typed by its parameters `P` (a
/// [`Params`] tuple, or a struct declared with [`params!`](crate::params), with its lifetimes
/// `'static`): it binds nothing else. The count of its `$n` is checked against `P`'s types when it
/// is built; its name and its `PREPARE` are decided at its first use.
pub(crate) struct Statement<P> {
    text: String,
    typed: OnceLock<Typed>,
    params: PhantomData<fn(P)>,
}

impl<P: Params> Statement<P> {
    /// `text`, whose `$1 … $n` are `P`'s fields (or elements) in order.
    ///
    /// # Panics
    ///
    /// When `text`'s highest `$n` is not the number of `P`'s parameters (a statement declared with
    /// the wrong parameters: every module's unit tests build all its statements).
    pub(crate) fn new(text: String) -> Statement<P> {
        typed::check(&text, P::TYPES);
        Statement {
            text,
            typed: OnceLock::new(),
            params: PhantomData,
        }
    }

    /// What `P`'s types decide for this statement.
    fn typed(&self) -> &Typed {
        self.typed.get_or_init(|| Typed::new(&self.text, P::TYPES))
    }

    /// The statement as sent unprepared, with `$1 … $n`.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The key of the name it is prepared under (unique to its text and types): 16 bytes of a
    /// digest of them, hashed by [`ByKey`] without SipHash.
    pub(crate) fn key(&self) -> u128 {
        self.typed().key
    }

    /// Runs the statement with `params` on `client` in one round trip in steady state, in `way`:
    /// with the protocol-level statement kept in `cache`, as `EXECUTE` of the SQL-level one, or
    /// unprepared (planned for this call only).
    pub(crate) fn query<Q: Params<Static = P::Static>>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        way: Way,
        params: &Q,
    ) -> Result<Vec<Row>, Failure> {
        params.with_values(|values| {
            let call = Call {
                text: &self.text,
                typed: self.typed(),
                values,
            };
            let result = match way {
                Way::Protocol => call.protocol(client, cache),
                Way::Sql => call.sql_level(client, cache),
                Way::Unprepared => call.unprepared(client),
            };
            cache.end_call();
            result
        })
    }

    /// Prepares the statement on `client` in `way` unless `cache` says it is prepared there,
    /// without running it. A lease runs this before handing out its cancel key: a cancel that
    /// reaches a session between two statements is dropped, so the key must cover only the
    /// statement that can block.
    pub(crate) fn prepare(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        way: Way,
    ) -> Result<(), Failure> {
        let call = Call {
            text: &self.text,
            typed: self.typed(),
            values: &[],
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

impl<P> fmt::Debug for Statement<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Statement")
            .field("name", &self.typed.get().map(|t| &t.name))
            .field("text", &self.text)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use postgres::types::Type;

    use super::*;

    #[test]
    fn a_statement_is_typed_by_its_parameters() {
        let s = Statement::<(&str, i64)>::new("SELECT $1, $2".into());
        assert_eq!(
            s.key(),
            Typed::new("SELECT $1, $2", &[Type::TEXT, Type::INT8]).key
        );
    }
}
