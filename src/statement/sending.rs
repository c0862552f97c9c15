//! How a [`Db`](crate::Db) sends statements: its mode, where its configuration says the server is,
//! and the way each connection gets, decided at its first statement.

use std::sync::Arc;

use postgres::{Client, Row};

use super::cache::Cache;
use super::direct::{asked, Targets};
use super::failure::Failure;
use super::mode::{StatementMode, StatementModes, Way, Ways};
use super::params::Params;
use super::Statement;
use crate::observe;

/// A `Db`'s statement mode, where its configuration says the server is, and the record of the ways
/// its connections got (shared by its clones).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sending {
    /// How statements are sent ([`Db::with_statement_mode`](crate::Db::with_statement_mode)).
    mode: StatementMode,
    /// Where the configuration says the server is, for [`StatementMode::Auto`]'s proof: `None`
    /// for a pool of the application's own.
    targets: Option<Arc<Targets>>,
    /// The ways the connections got, and whether a pooler was found.
    ways: Arc<Ways>,
}

impl Sending {
    pub(crate) fn mode(&self) -> StatementMode {
        self.mode
    }

    /// Connections already used switch at their next statement.
    pub(crate) fn set_mode(&mut self, mode: StatementMode) {
        self.mode = mode;
    }

    /// Sets where the configuration says the server is (a pool pgtenure built).
    pub(crate) fn set_targets(&mut self, targets: Targets) {
        self.targets = Some(Arc::new(targets));
    }

    /// How the connections have sent statements so far.
    pub(crate) fn modes(&self) -> StatementModes {
        self.ways.snapshot()
    }

    /// Runs `statement` with `params` once on `client`, whose cache is `cache`, in the way the
    /// connection's statement mode decided.
    pub(crate) fn run<P: Params, Q: Params<Static = P::Static>>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        statement: &Statement<P>,
        params: &Q,
    ) -> Result<Vec<Row>, Failure> {
        self.on_conn(client, cache, |client, cache, way| {
            statement.query(client, cache, way, params)
        })
    }

    /// Prepares `statement` on `client` if `cache` does not say it is there, without running it
    /// (see [`Statement::prepare`]).
    pub(crate) fn prepare<P: Params>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        statement: &Statement<P>,
    ) -> Result<(), Failure> {
        self.on_conn(client, cache, |client, cache, way| {
            statement.prepare(client, cache, way)
        })
    }

    /// Runs `f` with the way of the connection, deciding it first if the connection has none yet;
    /// takes up a pooler, or vanishing statements, that the connection found.
    fn on_conn<T>(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        f: impl FnOnce(&mut Client, &mut Cache, Way) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let result = self
            .way(client, cache)
            .and_then(|way| f(client, cache, way));
        if cache.vanishing_found || cache.pooler_found {
            self.take_up(cache);
        }
        result
    }

    /// Records what the connection found for every connection of the `Db`, and warns once.
    fn take_up(&self, cache: &mut Cache) {
        if std::mem::take(&mut cache.vanishing_found) && self.ways.found_vanishing() {
            log::warn!(
                target: "pgtenure::db",
                "prepared statements keep vanishing from this Db's server connections (a pooler \
                 that resets them after every transaction, such as PgBouncer with \
                 server_reset_query_always): connections where they do send statements unprepared \
                 from now on; set statement_mode=unprepared for it"
            );
        }
        if std::mem::take(&mut cache.pooler_found) && self.ways.found_pooler() {
            log::warn!(
                target: "pgtenure::db",
                "a pooler sits between pgtenure and the server (a protocol-level prepared statement \
                 was missing on another backend than the session's own): this Db sends SQL-level \
                 statements on every connection from now on; set statement_mode=sql for it"
            );
        }
    }

    /// The way `client` sends statements: decided at its first statement under the `Db`'s mode
    /// (with [`StatementMode::Auto`], by the proof), and again when the mode changed or a pooler
    /// was found.
    fn way(&self, client: &mut Client, cache: &mut Cache) -> Result<Way, Failure> {
        if cache.vanishing {
            return Ok(Way::Unprepared);
        }
        let pooler = self.ways.pooler_found();
        match cache.way {
            Some(Way::Protocol) if pooler => {
                cache.found_pooler();
                return Ok(Way::Sql);
            }
            Some(way) if cache.mode == Some(self.mode) => return Ok(way),
            _ => {}
        }
        let (way, why) = match self.mode {
            StatementMode::Unprepared => (Way::Unprepared, "statement_mode=unprepared".to_owned()),
            StatementMode::Sql => (Way::Sql, "statement_mode=sql".to_owned()),
            _ if pooler => (Way::Sql, "a pooler was found earlier".to_owned()),
            mode => self.prove(client, cache, mode)?,
        };
        log::info!(
            target: "pgtenure::db",
            "a pool connection sends {} statements ({why})",
            match way {
                Way::Protocol => "protocol-level prepared",
                Way::Sql => "SQL-level prepared",
                Way::Unprepared => "unprepared",
            }
        );
        if cache.mode.is_none() {
            self.ways.count(way);
            observe::connection_mode(match way {
                Way::Protocol => "protocol",
                Way::Sql => "sql",
                Way::Unprepared => "unprepared",
            });
        }
        cache.mode = Some(self.mode);
        cache.way = Some(way);
        Ok(way)
    }

    /// The way of a connection under `Auto` or `Protocol`, and why: the session asked where it
    /// runs (its backend recorded for the backstop), then under `Auto` the proof.
    fn prove(
        &self,
        client: &mut Client,
        cache: &mut Cache,
        mode: StatementMode,
    ) -> Result<(Way, String), Failure> {
        let Some(targets) = self
            .targets
            .as_deref()
            .filter(|_| mode == StatementMode::Auto)
        else {
            if mode == StatementMode::Auto {
                return Ok((
                    Way::Sql,
                    "a pool of the application's own: its configured host is unknown".to_owned(),
                ));
            }
            cache.pid = asked(client, &mut cache.seen)?.map(|seen| seen.pid);
            return Ok((Way::Protocol, "statement_mode=protocol".to_owned()));
        };
        Ok(match asked(client, &mut cache.seen)? {
            None => (Way::Sql, "the session did not say where it runs".to_owned()),
            Some(seen) if targets.direct(&seen) => {
                cache.pid = Some(seen.pid);
                (
                    Way::Protocol,
                    format!("proven direct: the server accepted it at {seen}"),
                )
            }
            Some(seen) => (
                Way::Sql,
                format!(
                    "not proven direct: the server accepted it at {seen}, not at {targets} where \
                     the configuration points"
                ),
            ),
        })
    }
}
