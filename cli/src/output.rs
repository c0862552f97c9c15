//! How listings are shown: aligned tables for people, JSON for scripts, UTC timestamps for both.
//! Each listing has its pair of renderers here (`leases_table` and `leases_json`, ...), which its
//! subcommand under `cmd/` and `status` share; and how a failure is said on stderr.

mod table;

use std::time::SystemTime;

use pgtenure::membership::{Assignment, ProcessInfo};
use pgtenure::postgres::error::SqlState;
use pgtenure::semaphores::PermitInfo;
use pgtenure::{elector::LeaderInfo, leases::LeaseInfo, tick_claims::JobInfo, Db, Error};
use serde_json::{json, Value};

use self::table::Table;
use crate::global::Global;
pub(crate) use crate::global::Output;

/// What a command can fail with: the library's errors, and the command's own (a missing URL, a
/// command that cannot be started), each printed with its message.
pub(crate) type Failure = Box<dyn std::error::Error>;

/// What to do about pgtenure's tables missing in the database the command was given.
pub(crate) const MISSING_TABLES: &str = "the application creates its tables at startup \
     (pgtenure::migrate, or create_table on each primitive); check --url and the table flags \
     (--leases-table, --leader-table, --ticks-table, --processes-table, --units-table, \
     --semaphores-table)";

/// Says why the command failed, on stderr.
pub(crate) fn report(e: &Failure) {
    match e.downcast_ref::<Error>() {
        // An operator's question, not the application's: say what is missing and who creates
        // it, not which library call to make.
        Some(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => say!(
            "pgtenure: {}; {MISSING_TABLES}",
            e.as_db_error()
                .map_or("a table does not exist", |db| db.message())
        ),
        _ => say!("pgtenure: {e}"),
    }
}

/// What a table is rendered against: the database's clock, and whether it is wide.
#[derive(Debug)]
pub(crate) struct View {
    now: SystemTime,
    wide: bool,
}

impl View {
    /// An id in full when wide, else its first 8 characters (as `docker ps` shows ids).
    fn id(&self, id: &str) -> String {
        if self.wide {
            id.to_owned()
        } else {
            id.chars().take(8).collect()
        }
    }
}

/// What a table is rendered against: the database clock (one statement; none for JSON).
pub(crate) fn view(db: &Db, global: &Global) -> Result<View, Failure> {
    let now = if global.as_json() {
        SystemTime::UNIX_EPOCH
    } else {
        // Unnamed, in one round trip (behind a pooler as well).
        let rows = db.connection()?.query_typed("SELECT now()", &[])?;
        // Read with try_get: an answer of another type renders against the epoch, never panics.
        rows.first()
            .and_then(|row| row.try_get(0).ok())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    Ok(View {
        now,
        wide: global.output == Output::Wide,
    })
}

/// Prints `json` with `--json`, else the table `text` makes.
pub(crate) fn show(
    global: &Global,
    json: &Value,
    text: impl FnOnce() -> String,
) -> Result<u8, Failure> {
    if global.as_json() {
        outln!("{json}");
    } else {
        out!("{}", text());
    }
    Ok(0)
}

/// `yes` or `no`.
/// `n` and its noun, singular for one: `1 lease`, `0 leases`, `2 processes`.
pub(crate) fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

/// A database timestamp in UTC, to the millisecond: `2026-12-01T21:53:47.123Z`.
pub(crate) fn time(t: SystemTime) -> String {
    pgtenure::Timestamp::new(t).to_string()
}

/// `t` against the database's `now`: `in 4s` ahead, `2m ago` behind (`now` at the second).
pub(crate) fn relative(t: SystemTime, now: SystemTime) -> String {
    // PostgreSQL's infinity and -infinity, as the words.
    let absolute = time(t);
    if absolute.ends_with("infinity") {
        return absolute;
    }
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", short(ahead)),
        Err(behind) => format!("{} ago", short(behind.duration())),
    }
}

/// How long since `t` by the database's `now`, kubectl's AGE: `45s`, `3m`, `5h`, `2d`.
fn age(t: SystemTime, now: SystemTime) -> String {
    short(now.duration_since(t).unwrap_or_default())
}

/// A duration in one unit: seconds under 2 minutes, minutes under 2 hours, hours under 2 days,
/// then days.
fn short(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7_199 => format!("{}m", secs / 60),
        7_200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// An optional timestamp; `-` when absent.
fn opt_time(t: Option<SystemTime>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// An optional timestamp as JSON: a string, or null.
fn json_time(t: Option<SystemTime>) -> serde_json::Value {
    t.map_or(serde_json::Value::Null, |t| time(t).into())
}

pub(crate) fn leases_table(rows: &[LeaseInfo], view: &View) -> String {
    let mut headers = vec![
        "KEY",
        "OWNER",
        "TOKEN",
        "HELD",
        "EXPIRES",
        "AGE",
        "SUPERSEDED",
    ];
    if view.wide {
        headers.extend(["ACQUIRED_AT", "HELD_UNTIL", "MANAGED"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.key.clone(),
            r.owner.clone(),
            r.token.to_string(),
            yes_no(r.live),
            relative(r.held_until, view.now),
            age(r.acquired_at, view.now),
            yes_no(r.superseded),
        ];
        if view.wide {
            row.extend([time(r.acquired_at), time(r.held_until), yes_no(r.managed)]);
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn leases_json(rows: &[LeaseInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "key": r.key,
                "owner": r.owner,
                "token": r.token,
                "live": r.live,
                "acquired_at": time(r.acquired_at),
                "held_until": time(r.held_until),
                "superseded": r.superseded,
                "managed": r.managed,
            })
        })
        .collect()
}

/// The live permits, by key and slot.
pub(crate) fn permits_table(rows: &[PermitInfo], view: &View) -> String {
    let mut headers = vec!["KEY", "SLOT", "OWNER", "TOKEN", "EXPIRES", "AGE"];
    if view.wide {
        headers.extend(["ACQUIRED_AT", "HELD_UNTIL"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.key.clone(),
            r.slot.to_string(),
            r.owner.clone(),
            r.token.to_string(),
            relative(r.held_until, view.now),
            age(r.acquired_at, view.now),
        ];
        if view.wide {
            row.extend([time(r.acquired_at), time(r.held_until)]);
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn permits_json(rows: &[PermitInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "key": r.key,
                "slot": r.slot,
                "owner": r.owner,
                "token": r.token,
                "acquired_at": time(r.acquired_at),
                "held_until": time(r.held_until),
            })
        })
        .collect()
}

pub(crate) fn leaders_table(rows: &[LeaderInfo], view: &View) -> String {
    let mut headers = vec![
        "NAME",
        "HOLDER",
        "TERM",
        "LEADS",
        "EXPIRES",
        "AGE",
        "RESIGN_REQUESTED",
    ];
    if view.wide {
        headers.extend(["ELECTED_AT", "EXPIRES_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.name.clone(),
            r.holder.clone(),
            r.term.to_string(),
            yes_no(r.live),
            relative(r.expires_at, view.now),
            age(r.elected_at, view.now),
            yes_no(r.resign_requested),
        ];
        if view.wide {
            row.extend([time(r.elected_at), time(r.expires_at)]);
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn leaders_json(rows: &[LeaderInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "name": r.name,
                "holder": r.holder,
                "term": r.term,
                "live": r.live,
                "elected_at": time(r.elected_at),
                "expires_at": time(r.expires_at),
                "resign_requested": r.resign_requested,
            })
        })
        .collect()
}

pub(crate) fn members_table(rows: &[ProcessInfo], view: &View) -> String {
    let mut headers = vec![
        "PROCESS", "NAME", "VERSION", "LIVE", "UNITS", "WEIGHT", "EXPIRES", "AGE",
    ];
    if view.wide {
        headers.extend(["STARTED_AT", "EXPIRES_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            view.id(&r.id),
            r.hostname.clone(),
            r.version.clone(),
            yes_no(r.live),
            r.units.to_string(),
            r.weight.to_string(),
            relative(r.expires_at, view.now),
            age(r.started_at, view.now),
        ];
        if view.wide {
            row.extend([time(r.started_at), time(r.expires_at)]);
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn members_json(rows: &[ProcessInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "id": r.id,
                // The process's name (`Config::with_name`, else its host name); "hostname" is the
                // same column under its old key, for scripts written before.
                "name": r.hostname,
                "hostname": r.hostname,
                "version": r.version,
                "live": r.live,
                "settled": r.settled,
                "units": r.units,
                "weight": r.weight,
                "started_at": time(r.started_at),
                "expires_at": time(r.expires_at),
            })
        })
        .collect()
}

pub(crate) fn units_table(rows: &[Assignment], view: &View) -> String {
    let mut headers = vec![
        "TENANT",
        "SHARD",
        "WEIGHT",
        "OWNER",
        "OWNER_LIVE",
        "TOKEN",
        "AGE",
    ];
    if view.wide {
        headers.push("CLAIMED_AT");
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.unit.tenant.clone(),
            r.unit.shard.to_string(),
            r.weight.to_string(),
            r.owner
                .as_deref()
                .map_or_else(|| "-".into(), |o| view.id(o)),
            yes_no(r.owner_live),
            r.token.map_or_else(|| "-".into(), |t| t.to_string()),
            r.claimed_at
                .map_or_else(|| "-".into(), |at| age(at, view.now)),
        ];
        if view.wide {
            row.push(opt_time(r.claimed_at));
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn units_json(rows: &[Assignment]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "tenant": r.unit.tenant,
                "shard": r.unit.shard,
                "weight": r.weight,
                "owner": r.owner,
                "owner_live": r.owner_live,
                "token": r.token,
                "claimed_at": json_time(r.claimed_at),
            })
        })
        .collect()
}

pub(crate) fn jobs_table(rows: &[JobInfo], view: &View) -> String {
    let mut headers = vec!["JOB", "LAST_TICK", "OWNER", "TOKEN", "BUSY", "BUSY_UNTIL"];
    if view.wide {
        headers.extend(["TICK", "BUSY_UNTIL_AT"]);
    }
    let mut t = Table::new(&headers);
    for r in rows {
        let mut row = vec![
            r.job_id.clone(),
            relative(r.tick, view.now),
            r.owner.clone(),
            r.token.to_string(),
            yes_no(r.busy),
            r.busy_until
                .filter(|_| r.busy)
                .map_or_else(|| "-".into(), |until| relative(until, view.now)),
        ];
        if view.wide {
            row.extend([time(r.tick), opt_time(r.busy_until)]);
        }
        t.row(row);
    }
    t.render()
}

pub(crate) fn jobs_json(rows: &[JobInfo]) -> Value {
    rows.iter()
        .map(|r| {
            json!({
                "job_id": r.job_id,
                "tick": time(r.tick),
                "owner": r.owner,
                "token": r.token,
                "busy": r.busy,
                "busy_until": json_time(r.busy_until),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_say_one_in_the_singular() {
        assert_eq!(count(1u32, "lease", "leases"), "1 lease");
        assert_eq!(count(0u32, "lease", "leases"), "0 leases");
        assert_eq!(count(2u32, "process", "processes"), "2 processes");
    }

    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn relative_times_read_as_kubectl_writes_them() {
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let at = |delta: i64| {
            if delta >= 0 {
                now + std::time::Duration::from_secs(delta as u64)
            } else {
                now - std::time::Duration::from_secs((-delta) as u64)
            }
        };
        assert_eq!(relative(at(4), now), "in 4s");
        assert_eq!(relative(at(-150), now), "2m ago");
        assert_eq!(relative(at(7_300), now), "in 2h");
        assert_eq!(age(at(-3 * 86_400), now), "3d");
        assert_eq!(
            age(at(5), now),
            "0s",
            "a clock ahead of the database is not negative"
        );
    }

    #[test]
    fn infinite_times_read_as_the_words() {
        // As the driver decodes PostgreSQL's infinity: its epoch plus i64::MAX microseconds.
        let postgres_epoch = UNIX_EPOCH + std::time::Duration::from_secs(946_684_800);
        let infinity = postgres_epoch + std::time::Duration::from_micros(i64::MAX as u64);
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
        assert_eq!(relative(infinity, now), "infinity");
        assert_eq!(time(infinity), "infinity");
    }

    #[test]
    fn timestamps_are_utc_to_the_millisecond() {
        let t = UNIX_EPOCH + std::time::Duration::from_millis(1_764_625_427_123);
        assert_eq!(time(t), "2025-12-01T21:43:47.123Z");
        assert_eq!(opt_time(None), "-");
    }
}
