//! One read of pgtenure's tables, what `/metrics` and the page both render: every section whose
//! table exists, against the database clock. A table that exists but that the exporter's role
//! cannot read (no `SELECT` on it, or no `USAGE` on its schema, which hides it from the role as if
//! it did not exist) is a failure of its own, never an absent table: see [`Denied`].

use std::time::{Duration, Instant, SystemTime};

use pgtenure::membership::{ProcessInfo, Units, Unowned};
use pgtenure::postgres::error::SqlState;
use pgtenure::postgres::types::Type;
use pgtenure::{
    elector::{Elector, LeaderInfo},
    leases::{LeaseSummary, Leases},
    semaphores::{Semaphore, SemaphoreSummary},
    tick_claims::{JobInfo, TickClaims},
    Db, Error,
};

use crate::Failure;

/// The handles on the tables the global flags name, opened once.
#[derive(Debug)]
pub(super) struct Tables {
    pub(super) db: Db,
    pub(super) leases: Leases,
    pub(super) elector: Elector,
    pub(super) ticks: TickClaims,
    pub(super) units: Units,
    pub(super) semaphores: Semaphore,
    /// Their names, as the global flags give them.
    pub(super) names: TableNames,
    /// How many held leases to read, those closest to lapsing (`--max-series`).
    pub(super) soonest: usize,
}

/// The tables' names (`table` or `schema.table`).
#[derive(Debug)]
pub(super) struct TableNames {
    pub(super) leases: String,
    pub(super) leader: String,
    pub(super) ticks: String,
    pub(super) processes: String,
    pub(super) units: String,
    pub(super) semaphores: String,
}

/// The membership tables' section: the processes and the units nobody owns.
#[derive(Debug)]
pub(super) struct Membership {
    pub(super) processes: Vec<ProcessInfo>,
    pub(super) unowned: Unowned,
}

/// A primitive's table that exists but that the exporter's role cannot read: its section is
/// `None`, and the scrape says so (`pgtenure_exporter_table_readable 0`, a line on stderr).
#[derive(Debug)]
pub(super) struct Denied {
    /// `leases`, `leader`, `membership`, `jobs` or `semaphores`.
    pub(super) primitive: &'static str,
    pub(super) table: String,
    /// The server's reason, with its SQLSTATE and what to grant.
    pub(super) why: String,
}

/// What one scrape read; a section is `None` when its table does not exist or cannot be read
/// (then it is in `denied`).
#[derive(Debug)]
pub(super) struct Snapshot {
    /// The database's clock when the read began.
    pub(super) now: SystemTime,
    pub(super) leases: Option<LeaseSummary>,
    pub(super) leaders: Option<Vec<LeaderInfo>>,
    pub(super) membership: Option<Membership>,
    pub(super) jobs: Option<Vec<JobInfo>>,
    /// The semaphores' counts and the `--max-series` keys with the most live permits.
    pub(super) semaphores: Option<SemaphoreSummary>,
    pub(super) denied: Vec<Denied>,
    /// How long the read took.
    pub(super) took: Duration,
}

/// Why a role does not see a table of its search path: the schemas holding a table of that name
/// on which it has no `USAGE` (PostgreSQL leaves such schemas out of the search path, so the
/// table reads as absent, 42P01), its search path and its name. One round trip, unnamed.
const HIDDEN: &str = "SELECT pg_catalog.current_setting('search_path'), current_user::text, \
     ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_class c \
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
           WHERE c.relname = $1 AND NOT pg_catalog.has_schema_privilege(n.oid, 'USAGE'))";

impl Tables {
    /// Reads every table: seven statements, each on a pooled connection of its own. The leases are
    /// counted on the server, and only the `soonest` closest to lapsing are sent
    /// ([`Leases::summary`]); the membership is read from the processes table and the claimable
    /// units only, never every unit ([`Units::unowned`]). A table that does not answer as there
    /// costs one more statement, telling absent from hidden.
    pub(super) fn read(&self) -> Result<Snapshot, Failure> {
        let started = Instant::now();
        // Unnamed, in one round trip (behind a pooler as well).
        let rows = self.db.connection()?.query_typed("SELECT now()", &[])?;
        let now = match rows.first() {
            Some(row) => row.try_get(0)?,
            None => SystemTime::UNIX_EPOCH,
        };
        let names = &self.names;
        let mut denied = Vec::new();
        let leases = self.section(
            "leases",
            &names.leases,
            self.leases.summary(self.soonest),
            &mut denied,
        )?;
        let leaders = self.section("leader", &names.leader, self.elector.leaders(), &mut denied)?;
        let membership = match self.section(
            "membership",
            &names.processes,
            self.units.processes(),
            &mut denied,
        )? {
            Some(processes) => self
                .section(
                    "membership",
                    &names.units,
                    self.units.unowned(),
                    &mut denied,
                )?
                .map(|unowned| Membership { processes, unowned }),
            None => None,
        };
        let jobs = self.section("jobs", &names.ticks, self.ticks.jobs(), &mut denied)?;
        let semaphores = self.section(
            "semaphores",
            &names.semaphores,
            self.semaphores.summary(self.soonest),
            &mut denied,
        )?;
        Ok(Snapshot {
            now,
            leases,
            leaders,
            membership,
            jobs,
            semaphores,
            denied,
            took: started.elapsed(),
        })
    }

    /// One section: its rows, `None` when `table` does not exist, or `None` and a [`Denied`]
    /// when the role cannot read it (42501, or a 42P01 for a table its search path holds in a
    /// schema it has no `USAGE` on) or the table is at an older schema version than this
    /// pgtenure reads (`ErrorKind::Schema`).
    fn section<T>(
        &self,
        primitive: &'static str,
        table: &str,
        result: Result<T, Error>,
        denied: &mut Vec<Denied>,
    ) -> Result<Option<T>, Failure> {
        let e = match result {
            Ok(rows) => return Ok(Some(rows)),
            Err(e) => e,
        };
        let server = e
            .as_db_error()
            .map(|db| format!("{} ({})", db.message(), db.code().code()))
            .unwrap_or_else(|| e.to_string());
        let why = match e.code() {
            Some(code) if *code == SqlState::INSUFFICIENT_PRIVILEGE => {
                format!("{server}: grant the exporter's role SELECT on it and USAGE on its schema")
            }
            Some(code) if *code == SqlState::UNDEFINED_TABLE => match self.hidden(table)? {
                Some(why) => format!("{why}; the server says {server}"),
                None => return Ok(None),
            },
            // Older than this pgtenure reads (or recorded as another kind): unreadable until
            // migrated, and the message says so.
            _ if e.kind() == pgtenure::ErrorKind::Schema => e.to_string(),
            _ => return Err(e.into()),
        };
        denied.push(Denied {
            primitive,
            table: table.to_owned(),
            why,
        });
        Ok(None)
    }

    /// Why `table`, which the server says does not exist, may exist unseen: a schema of the
    /// search path holds it and the role has no `USAGE` on that schema. `None` when no such
    /// schema does (the table is absent), or when `table` names its schema (then the server says
    /// 42501 itself).
    fn hidden(&self, table: &str) -> Result<Option<String>, Failure> {
        if table.contains('.') {
            return Ok(None);
        }
        let rows = self
            .db
            .connection()?
            .query_typed(HIDDEN, &[(&table, Type::TEXT)])?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let search_path: String = row.try_get(0)?;
        let role: String = row.try_get(1)?;
        let unusable: Vec<String> = row.try_get(2)?;
        Ok(first_hidden(&search_path, &role, &unusable).map(|schema| {
            format!(
                "permission denied for schema {schema} (42501): role {role} has no USAGE on \
                     schema {schema} of its search path, which holds table {table}, so the table \
                     is invisible to it; GRANT USAGE ON SCHEMA {schema} TO {role} (and SELECT on \
                     the table)"
            )
        }))
    }
}

/// The schemas of `search_path` (as `SHOW search_path` writes it: names separated by commas,
/// double-quoted where needed, `$user` for the role's own), in order.
fn search_path_schemas(search_path: &str, role: &str) -> Vec<String> {
    let mut schemas = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = search_path.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => schemas.push(std::mem::take(&mut current)),
            c if c.is_whitespace() && !quoted => {}
            // Unquoted names are folded to lower case, as the server does.
            c if !quoted => current.extend(c.to_lowercase()),
            c => current.push(c),
        }
    }
    schemas.push(current);
    schemas
        .into_iter()
        .filter(|s| !s.is_empty())
        .map(|s| if s == "$user" { role.to_owned() } else { s })
        .collect()
}

/// The first schema of `search_path` among `unusable`.
fn first_hidden(search_path: &str, role: &str, unusable: &[String]) -> Option<String> {
    search_path_schemas(search_path, role)
        .into_iter()
        .find(|schema| unusable.contains(schema))
}

impl Snapshot {
    /// Keys with live permits beyond those read (`--max-series`): counted, without a series.
    pub(super) fn unlisted_semaphores(&self) -> u64 {
        self.semaphores
            .as_ref()
            .map_or(0, |s| s.held_keys.saturating_sub(s.busiest.len() as u64))
    }

    /// Held leases beyond those read (`--max-series`): counted, without a series or a row.
    pub(super) fn unlisted_leases(&self) -> i64 {
        self.leases.as_ref().map_or(0, |leases| {
            (leases.held - leases.soonest.len() as i64).max(0)
        })
    }

    /// Seconds from the database's `now` to `t`: negative when `t` is past.
    pub(super) fn seconds_until(&self, t: SystemTime) -> f64 {
        match t.duration_since(self.now) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        }
    }
}

impl Membership {
    /// The live processes, oldest first.
    pub(super) fn live(&self) -> impl Iterator<Item = &ProcessInfo> {
        self.processes.iter().filter(|p| p.live)
    }

    /// The most units a live process owns less the fewest (0 with fewer than two), and the same
    /// for their weight.
    pub(super) fn spread(&self) -> (i64, i64) {
        let units = self.live().map(|p| i64::from(p.units));
        let weights = self.live().map(|p| p.weight);
        (range(units), range(weights))
    }

    /// The units each live process would own in a balanced fleet: those the live processes own
    /// and those nobody live owns (never claimed, released, or an expired process's), shared out
    /// among the live processes. `None` without a live process.
    pub(super) fn fair_share(&self) -> Option<f64> {
        let owned: i64 = self.live().map(|p| i64::from(p.units)).sum();
        fair_share(owned, self.unowned.units, self.live().count())
    }
}

/// `owned + unowned` units shared out among `live` processes; `None` when `live` is 0.
fn fair_share(owned: i64, unowned: i64, live: usize) -> Option<f64> {
    (live > 0).then(|| (owned + unowned.max(0)) as f64 / live as f64)
}

/// The largest value less the smallest; 0 when empty.
fn range(values: impl Iterator<Item = i64>) -> i64 {
    let (min, max) = values.fold((i64::MAX, i64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if min > max {
        0
    } else {
        max - min
    }
}

#[cfg(test)]
mod tests {
    use super::{fair_share, first_hidden, range, search_path_schemas};

    #[test]
    fn the_search_path_is_read_as_the_server_writes_it() {
        assert_eq!(
            search_path_schemas("\"$user\", public", "app"),
            ["app", "public"]
        );
        assert_eq!(
            search_path_schemas("Tenants, \"My \"\"odd\"\", schema\",x", "app"),
            ["tenants", "My \"odd\", schema", "x"]
        );
        assert_eq!(search_path_schemas("", "app"), Vec::<String>::new());
        assert_eq!(search_path_schemas("\"\"", "app"), Vec::<String>::new());
    }

    /// A schema the role cannot use hides a table only when it is on the role's search path: the
    /// same name in another tenant's schema is not this exporter's table.
    #[test]
    fn a_table_is_hidden_only_by_a_schema_of_the_search_path() {
        let unusable = ["other".to_owned(), "app".to_owned()];
        assert_eq!(
            first_hidden("\"$user\", public", "app", &unusable),
            Some("app".to_owned())
        );
        assert_eq!(first_hidden("public", "app", &unusable), None);
        assert_eq!(first_hidden("public", "app", &[]), None);
    }

    #[test]
    fn the_spread_is_the_largest_less_the_smallest() {
        assert_eq!(range([].into_iter()), 0);
        assert_eq!(range([4].into_iter()), 0);
        assert_eq!(range([4, 9, 1].into_iter()), 8);
    }

    /// Units nobody owns are work the live processes will share: a process that joined late,
    /// owning none beside two owning 4 while 4 wait, is the one below its share, not the others
    /// above it.
    #[test]
    fn the_fair_share_counts_the_units_nobody_owns() {
        assert_eq!(fair_share(8, 4, 3), Some(4.0));
        assert_eq!(fair_share(8, 0, 3), Some(8.0 / 3.0));
        assert_eq!(fair_share(0, 5, 2), Some(2.5));
        assert_eq!(fair_share(0, 5, 0), None);
    }
}
