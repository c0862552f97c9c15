//! Creating and migrating a primitive's tables under one advisory lock (the versions and steps are
//! in [`Kind`] and [`Plan`]), and checking the indexes and sequences the statements rely on
//! ([`Companion`]).

use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::types::Type;

use super::companion::{Companion, CompanionKind};
use super::found::Found;
use super::gate::VERSION_SQL;
use super::kind::Kind;
use super::plan::Plan;
use crate::db::{one_row, Db};
use crate::error::{Error, ErrorKind, Result};
use crate::row::Read;
use crate::table_name::TableName;

const LOCK_SQL: &str = include_str!("../../sql/schema/lock.sql");
const BOUNDS_SQL: &str = include_str!("../../sql/schema/bounds.sql");
const OWNER_SQL: &str = include_str!("../../sql/schema/owner.sql");
const SET_ROLE_SQL: &str = include_str!("../../sql/schema/set_role.sql");
const COMPANION_SQL: &str = include_str!("../../sql/schema/companion.sql");

/// The transaction-level advisory lock key every pgtenure `create_table` takes ("pgtenure" in ASCII).
const DDL_LOCK_KEY: i64 = 0x7067_7465_6e75_7265;

/// How long one attempt of a migration waits for a table lock (`lock_timeout`): the longest the
/// fleet's statements on the table queue behind it while a long transaction holds the table.
const MIGRATE_LOCK_WAIT: Duration = Duration::from_millis(100);
const MIGRATE_LOCK_WAIT_SQL: &str = "100ms";

/// How long a migration's transaction may wait for pgtenure's next statement before the server
/// ends the session (`idle_in_transaction_session_timeout`): a process paused mid-migration must
/// not hold the table's lock, and stop the fleet, for as long as it is paused. pgtenure sends the
/// statements of a migration one after another, with nothing in between.
const MIGRATE_IDLE_SQL: &str = "2s";

/// How long a migration keeps trying again after its attempts found the table locked.
const MIGRATE_PATIENCE: Duration = Duration::from_secs(60);

impl Db {
    /// Reads what the catalog says of `kind`'s `table` (the version statement, on `client`).
    fn found_on(
        client: &mut impl postgres::GenericClient,
        context: &str,
        kind: Kind,
        table: &TableName,
    ) -> Result<Found> {
        let quoted = table.quoted();
        let relations = kind.marker_relations(table);
        let row = client
            .query_typed(
                VERSION_SQL,
                &[(&quoted, Type::TEXT), (&relations, Type::TEXT_ARRAY)],
            )
            .map_err(|e| Error::from_postgres(context, e))
            .and_then(|rows| one_row(context, rows))?;
        let read = Read::server(&row, context, &"the catalog");
        let comment: Option<String> = read.column("comment")?;
        let columns: Vec<String> = read.column("columns")?;
        let found: Vec<String> = read.column("relations")?;
        Found::read(
            kind,
            table,
            read.column("present")?,
            comment.as_deref(),
            &columns,
            &found,
        )
    }

    /// What [`Db::migrate_table`] would run on `table`, from the catalog now.
    pub(crate) fn plan_table(&self, kind: Kind, table: &TableName) -> Result<Plan> {
        let context = format!("plan migration of {} table", kind.name());
        let mut conn = self.conn_until(&context, None)?;
        let found = Db::found_on(&mut *conn, &context, kind, table)?;
        Plan::new(kind, table, found, self.timeline_tokens())
    }

    /// Creates `kind`'s `table` at this build's version, or brings it there step by step, in one
    /// transaction under a transaction-level advisory lock, so that every instance may call it at
    /// once (concurrent `CREATE TABLE IF NOT EXISTS` statements can otherwise fail on PostgreSQL's
    /// catalog, and each finds the table as the one before it left it). A table at this build's
    /// version is left as it is, and then the role needs no `CREATE` privilege; one at a newer
    /// version is refused, unchanged.
    ///
    /// Then checks that every companion the statements need is what they need: `IF NOT EXISTS`
    /// skips an index or a sequence whose name another relation already has, so a name taken by a
    /// table (or a companion dropped by hand) would otherwise go unnoticed until it costs a scan or a
    /// failed `nextval`.
    ///
    /// Each attempt waits for a table lock at most [`MIGRATE_LOCK_WAIT`]: an `ALTER TABLE` waiting
    /// behind a long transaction on the table (a fenced write, a listing, `pg_dump`) would queue
    /// every statement of the fleet behind it, past their TTLs. An attempt that timed out rolled
    /// back; the next one starts after a pause, until [`MIGRATE_PATIENCE`] has passed, and then
    /// the error ([`ErrorKind::Timeout`]) says the table was in use.
    pub(crate) fn migrate_table(&self, kind: Kind, table: &TableName) -> Result<Plan> {
        let give_up = Instant::now() + MIGRATE_PATIENCE;
        let mut pause = Duration::from_millis(50);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let e = match self.migrate_table_once(kind, table) {
                Ok(plan) => return Ok(plan),
                Err(Attempt::Failed(e)) => return Err(e),
                Err(Attempt::Busy(e)) => e,
            };
            if Instant::now() + pause >= give_up {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "migrate {} table {table} failed: the table stayed locked by other \
                         transactions for {} s ({attempts} attempts, each waiting at most {} ms \
                         so that the statements of running instances do not queue behind the \
                         migration; last: {e}); end the long transactions on it (SELECT pid, \
                         xact_start, query FROM pg_stat_activity: a fenced write, a listing, \
                         pg_dump) and migrate again",
                        kind.name(),
                        MIGRATE_PATIENCE.as_secs(),
                        MIGRATE_LOCK_WAIT.as_millis()
                    ),
                )
                .with_source(e));
            }
            log::info!(target: "pgtenure::db", "migrate {} table {table}: {e}; trying again in {} ms", kind.name(), pause.as_millis());
            // Spread the instances that all found it locked.
            let spread = crate::instance::random_u64() % (pause.as_millis() as u64 + 1);
            std::thread::sleep(pause / 2 + Duration::from_millis(spread / 2));
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// One attempt of [`Db::migrate_table`], in one transaction: [`Attempt::Busy`] when it waited
    /// too long for a lock (rolled back, nothing changed), to be tried again.
    fn migrate_table_once(
        &self,
        kind: Kind,
        table: &TableName,
    ) -> std::result::Result<Plan, Attempt> {
        let mut context = format!("migrate {} table", kind.name());
        let mut conn = self.conn_until(&context, None)?;
        // READ COMMITTED whatever the role's default: each statement after the lock must see what
        // the instance that held it before committed.
        let mut tx = conn
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::ReadCommitted)
            .start()
            .map_err(|e| Attempt::Failed(Error::from_postgres(&context, e)))?;
        lock_for_migration(&mut tx, &context)?;
        let found = Db::found_on(&mut tx, &context, kind, table)?;
        let plan = Plan::new(kind, table, found, self.timeline_tokens())?;
        if found != Found::Absent {
            if let Some(owner) = act_as_owner(&mut tx, &context, table)? {
                context = format!("{context} (as the table's owner, role {owner})");
            }
        }
        let context = context.as_str();
        let fail = |e: postgres::Error| busy_or_failed(context, e);
        if found == Found::Unrecorded(kind.latest()) {
            record_if_allowed(&mut tx, context, kind, table, &plan)?;
        } else {
            for statement in plan.statements() {
                tx.batch_execute(statement).map_err(fail)?;
            }
        }
        for companion in kind.companions(table, self.timeline_tokens()) {
            ensure_companion(&mut tx, context, table, &companion)?;
        }
        tx.commit().map_err(fail)?;
        match found {
            Found::Absent => {
                log::info!(target: "pgtenure::db", "{context}: created table {table} at schema version {}", plan.target());
            }
            _ if plan.is_current() => {
                log::debug!(target: "pgtenure::db", "{context}: table {table} is at schema version {}", plan.target());
            }
            _ => {
                let from = plan
                    .version()
                    .map_or_else(|| "none".to_owned(), |v| v.to_string());
                log::info!(target: "pgtenure::db", "{context}: migrated table {table} from schema version {from} to {}", plan.target());
            }
        }
        self.schema_checks().passed(kind.name(), table);
        Ok(plan)
    }
}

/// Why an attempt of a migration did not finish.
enum Attempt {
    /// It waited too long for a lock; rolled back, to be tried again.
    Busy(Error),
    /// Anything else: returned.
    Failed(Error),
}

impl From<Error> for Attempt {
    fn from(e: Error) -> Attempt {
        Attempt::Failed(e)
    }
}

/// Takes pgtenure's advisory lock for the migration's transaction and bounds its waits (the table
/// lock, the idle time between its statements).
fn lock_for_migration(
    tx: &mut postgres::Transaction<'_>,
    context: &str,
) -> std::result::Result<(), Attempt> {
    // Other instances migrating hold the advisory lock for as long as their steps take: a
    // role's statement_timeout that ends this wait is waited out by trying again, as a lock
    // timeout is.
    tx.query_typed(LOCK_SQL, &[(&DDL_LOCK_KEY, Type::INT8)])
        .map_err(|e| {
            let busy = e.code() == Some(&SqlState::QUERY_CANCELED);
            let e = Error::from_postgres(
                &format!("{context}: wait for the other instances' migrations"),
                e,
            );
            if busy {
                Attempt::Busy(e)
            } else {
                Attempt::Failed(e)
            }
        })?;
    tx.query_typed(
        BOUNDS_SQL,
        &[
            (&MIGRATE_LOCK_WAIT_SQL, Type::TEXT),
            (&MIGRATE_IDLE_SQL, Type::TEXT),
        ],
    )
    .map_err(|e| Attempt::Failed(Error::from_postgres(context, e)))?;
    Ok(())
}

/// Sets the transaction's role to the owner of the existing `table`, returned (`None` when the
/// catalog names none).
fn act_as_owner(
    tx: &mut postgres::Transaction<'_>,
    context: &str,
    table: &TableName,
) -> std::result::Result<Option<String>, Attempt> {
    // A superuser or a member of the owning role migrating another role's table: as the
    // owner, so that what the steps make belongs to it (the application's role keeps
    // using the promotion record; a sequence can be owned by the token column).
    let owner = tx
        .query_typed(OWNER_SQL, &[(&table.quoted(), Type::TEXT)])
        .map_err(|e| Attempt::Failed(Error::from_postgres(context, e)))?;
    let Some(row) = owner.first() else {
        return Ok(None);
    };
    let owner: String = Read::server(row, context, &"pg_class").column("owner")?;
    tx.query_typed(SET_ROLE_SQL, &[(&owner, Type::TEXT)])
        .map_err(|e| Attempt::Failed(Error::from_postgres(context, e)))?;
    log::info!(target: "pgtenure::db", "{context}: migrating table {table} as its owner, role {owner}");
    Ok(Some(owner))
}

/// A failed statement of a migration: [`Attempt::Busy`] when it waited too long for a lock, or the
/// session was ended while idle, else [`Attempt::Failed`].
fn busy_or_failed(context: &str, e: postgres::Error) -> Attempt {
    // A table lock not granted within lock_timeout: the fleet's statements queued behind it
    // are let through, and the migration tries again.
    // Or this process was paused past MIGRATE_IDLE, and the server ended the session: the
    // migration rolled back; another connection tries again.
    let busy = e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
        || e.code() == Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT);
    let e = Error::from_postgres(context, e);
    if busy {
        Attempt::Busy(e)
    } else {
        Attempt::Failed(e)
    }
}

/// Writes the version record of a table that has every column of its latest version, unless this
/// role may not.
fn record_if_allowed(
    tx: &mut postgres::Transaction<'_>,
    context: &str,
    kind: Kind,
    table: &TableName,
    plan: &Plan,
) -> std::result::Result<(), Attempt> {
    let fail = |e: postgres::Error| busy_or_failed(context, e);
    // Every column there, only the record missing (a table made before versions were
    // recorded, or by a DBA without the COMMENT): a role that does not own it (it was
    // made by another) cannot write the record, and needs nothing else, so it goes on.
    let mut steps = tx.savepoint("pgtenure_record").map_err(fail)?;
    let applied = plan
        .statements()
        .iter()
        .try_for_each(|statement| steps.batch_execute(statement));
    match applied {
        Ok(()) => steps.commit().map_err(fail)?,
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            drop(steps);
            log::warn!(target: "pgtenure::db", "{context}: table {table} has no schema version record and this role cannot write it ({e}); its columns are those of version {}, so nothing else is needed: its owner's migrate records it", kind.latest());
        }
        Err(e) => return Err(fail(e)),
    }
    Ok(())
}

/// Checks that `companion` of `table` is there and is what it should be, making it again when it
/// was dropped by hand.
fn ensure_companion(
    tx: &mut postgres::Transaction<'_>,
    context: &str,
    table: &TableName,
    companion: &Companion,
) -> std::result::Result<(), Attempt> {
    let quoted = table.quoted();
    let mut found = companion_of(tx, context, companion, &quoted)?;
    if found.is_none() && !companion.create.is_empty() {
        // Dropped by hand: made again.
        for statement in &companion.create {
            tx.batch_execute(statement)
                .map_err(|e| busy_or_failed(context, e))?;
        }
        log::info!(target: "pgtenure::db", "{context}: created {} for {table}", companion.name);
        found = companion_of(tx, context, companion, &quoted)?;
    }
    let ok = match (companion.kind, &found) {
        // "I": the index of a partitioned table.
        (CompanionKind::Index, Some((kind, on_table))) => (kind == "i" || kind == "I") && *on_table,
        (CompanionKind::Sequence, Some((kind, _))) => kind == "S",
        (CompanionKind::Table, Some((kind, _))) => kind == "r",
        (_, None) => false,
    };
    if ok {
        return Ok(());
    }
    let what = companion.kind.noun();
    let problem = match found {
        Some(_) => format!("the name is taken by another relation, so the {what} was not created"),
        None => format!("the {what} does not exist (dropped, or the table was made by hand)"),
    };
    Err(Attempt::Failed(Error::new(
        ErrorKind::Database,
        format!(
            "{context} failed: {table} needs the {what} {} but {problem}; choose table \
             names whose derived names are free, or create the {what} as sql/ describes",
            companion.name
        ),
    )))
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
