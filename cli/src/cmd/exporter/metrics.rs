//! `/metrics`: a scrape in the Prometheus text format (version 0.0.4, which `promtool check
//! metrics` reads), written by the `prometheus` crate from a fresh registry each time, filled from
//! one [`Snapshot`].
//!
//! Every family is named `pgtenure_table_...` (what the tables say, for the whole fleet) or
//! `pgtenure_exporter_...` (the exporter itself), apart from the library's per-process metrics
//! (`pgtenure_leader`, `pgtenure_units_owned`, ...) so both can be scraped into one Prometheus.
//! docs/operating.md lists them.

use prometheus::{Gauge, GaugeVec, IntCounter, Opts, Registry, TextEncoder};

use super::snapshot::Snapshot;

/// The content type of what [`render`] writes.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A series' labels, as (name, value) pairs.
type Labels = Vec<(&'static str, String)>;

/// What the exporter keeps between scrapes.
#[derive(Debug)]
pub(super) struct Counters {
    /// Scrapes whose read of the tables failed.
    pub(super) scrape_errors: IntCounter,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            scrape_errors: IntCounter::new(
                "pgtenure_exporter_scrape_errors_total",
                "Scrapes whose read of the tables failed, since the exporter started",
            )
            .expect("a valid counter"),
        }
    }
}

/// A scrape's text: the tables' families from `read` when it succeeded, and the exporter's own
/// (`pgtenure_exporter_up` says which) either way. The leases read (at most `--max-series`, those
/// closest to lapsing) get a series of their own.
pub(super) fn render(read: Result<&Snapshot, ()>, counters: &Counters, took: f64) -> String {
    let registry = Registry::new();
    let r = &registry;
    gauge(
        r,
        "pgtenure_exporter_up",
        "1 when this scrape read the tables, 0 when it failed (the database unreachable or an \
         error; said on the exporter's stderr)",
        if read.is_ok() { 1.0 } else { 0.0 },
    );
    r.register(Box::new(counters.scrape_errors.clone()))
        .expect("registered once");
    gauge(
        r,
        "pgtenure_exporter_scrape_duration_seconds",
        "How long this scrape's read of the tables took (a failed one: how long the request \
         waited, from its arrival)",
        took,
    );
    if let Ok(snapshot) = read {
        tables(r, snapshot);
    }
    TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("the families are well formed")
}

/// The tables' families.
fn tables(r: &Registry, s: &Snapshot) {
    readability(r, s);
    lease_families(r, s);
    leader_families(r, s);
    membership_families(r, s);
    job_families(r, s);
    semaphore_families(r, s);
}

/// Which primitives' tables exist, and which this scrape could read.
fn readability(r: &Registry, s: &Snapshot) {
    let denied = |primitive: &str| s.denied.iter().any(|d| d.primitive == primitive);
    let read = [
        ("leases", s.leases.is_some()),
        ("leader", s.leaders.is_some()),
        ("membership", s.membership.is_some()),
        ("jobs", s.jobs.is_some()),
        ("semaphores", s.semaphores.is_some()),
    ];
    family(
        r,
        "pgtenure_exporter_table_present",
        "1 when the primitive's table exists in the database (readable or not), 0 when it does \
         not (the application does not use it, or names its table otherwise)",
        read.iter().map(|(primitive, read)| {
            (
                labels([("primitive", primitive)]),
                f64::from(*read || denied(primitive)),
            )
        }),
    );
    family(
        r,
        "pgtenure_exporter_table_readable",
        "For each primitive whose table exists: 1 when this scrape read it, 0 when the \
         exporter's role may not (no SELECT on it, no USAGE on its schema; the reason is said on \
         the exporter's stderr) and its families are left out",
        read.iter()
            .filter(|(primitive, read)| *read || denied(primitive))
            .map(|(primitive, read)| (labels([("primitive", primitive)]), f64::from(*read))),
    );
}

/// The leases table's families, when it was read.
fn lease_families(r: &Registry, s: &Snapshot) {
    let Some(leases) = &s.leases else {
        return;
    };
    gauge(
        r,
        "pgtenure_table_lease_rows",
        "Rows in the leases table, held or lapsed (a release deletes rows lapsed over an hour \
         ago, at most once a minute)",
        leases.rows as f64,
    );
    gauge(
        r,
        "pgtenure_table_leases_held",
        "Leases held now, by the database clock",
        leases.held as f64,
    );
    gauge(
        r,
        "pgtenure_table_leases_superseded",
        "Leases held now whose holder was asked to give them up",
        leases.superseded as f64,
    );
    if let Some(next_lapse) = leases.next_lapse {
        gauge(
            r,
            "pgtenure_table_leases_min_expiry_seconds",
            "Seconds until the held lease closest to lapsing lapses unless renewed (absent \
             when none is held)",
            s.seconds_until(next_lapse),
        );
    }
    family(
        r,
        "pgtenure_table_lease_expiry_seconds",
        "Seconds until each held lease lapses unless renewed; only the --max-series leases \
         closest to lapsing have a series",
        leases.soonest.iter().map(|l| {
            (
                labels([("key", &l.key), ("owner", &l.owner)]),
                s.seconds_until(l.held_until),
            )
        }),
    );
    gauge(
        r,
        "pgtenure_table_leases_unlisted",
        "Held leases beyond --max-series, without a series of their own (counted in \
         pgtenure_table_leases_held)",
        s.unlisted_leases() as f64,
    );
}

/// The leader table's families, when it was read.
fn leader_families(r: &Registry, s: &Snapshot) {
    let Some(rows) = &s.leaders else {
        return;
    };
    let fleet = |name: &str| labels([("fleet", name)]);
    family(
        r,
        "pgtenure_table_leader_present",
        "1 while a leader's tenure is live for the fleet, by the database clock, else 0",
        rows.iter().map(|l| (fleet(&l.name), f64::from(l.live))),
    );
    family(
        r,
        "pgtenure_table_leader_term",
        "The fleet's last term (live or ended)",
        rows.iter().map(|l| (fleet(&l.name), l.term as f64)),
    );
    family(
        r,
        "pgtenure_table_leader_tenure_seconds",
        "Seconds since the live leader was elected (absent while nobody leads)",
        rows.iter()
            .filter(|l| l.live)
            // Read after the clock: an election since then is 0 s old, not a few ms short.
            .map(|l| (fleet(&l.name), (-s.seconds_until(l.elected_at)).max(0.0))),
    );
    family(
        r,
        "pgtenure_table_leader_expiry_seconds",
        "Seconds until the live leader's tenure expires unless renewed (absent while nobody \
         leads)",
        rows.iter()
            .filter(|l| l.live)
            .map(|l| (fleet(&l.name), s.seconds_until(l.expires_at))),
    );
    family(
        r,
        "pgtenure_table_leader_info",
        "1 for the fleet's live leader, naming its holder",
        rows.iter()
            .filter(|l| l.live)
            .map(|l| (labels([("fleet", &l.name), ("holder", &l.holder)]), 1.0)),
    );
}

/// The membership tables' families, when they were read.
fn membership_families(r: &Registry, s: &Snapshot) {
    let Some(m) = &s.membership else {
        return;
    };
    let live: Vec<_> = m.live().collect();
    let (units_spread, weight_spread) = m.spread();
    gauge(
        r,
        "pgtenure_table_processes_live",
        "Membership processes live now, by the database clock",
        live.len() as f64,
    );
    gauge(
        r,
        "pgtenure_table_processes_expired",
        "Membership processes expired and not yet swept",
        (m.processes.len() - live.len()) as f64,
    );
    let process = |p: &pgtenure::membership::ProcessInfo| {
        labels([("process", &p.id), ("hostname", &p.hostname)])
    };
    family(
        r,
        "pgtenure_table_process_units",
        "Units each live process owns, as it last reported",
        live.iter().map(|p| (process(p), f64::from(p.units))),
    );
    family(
        r,
        "pgtenure_table_process_weight",
        "The total weight of the units each live process owns, as it last reported",
        live.iter().map(|p| (process(p), p.weight as f64)),
    );
    gauge(
        r,
        "pgtenure_table_units_spread",
        "Units of the most loaded live process less those of the least loaded (0 with \
         fewer than two); a balanced fleet keeps it at 1 or below",
        units_spread as f64,
    );
    gauge(
        r,
        "pgtenure_table_weight_spread",
        "The same spread, in weight",
        weight_spread as f64,
    );
    gauge(
        r,
        "pgtenure_table_units_unowned",
        "Enabled units no live process owns (never claimed, released, or an expired \
         process's)",
        m.unowned.units as f64,
    );
    gauge(
        r,
        "pgtenure_table_units_unowned_weight",
        "Their total weight",
        m.unowned.weight as f64,
    );
}

/// The tick claims table's families (the scheduled jobs), when it was read.
fn job_families(r: &Registry, s: &Snapshot) {
    let Some(rows) = &s.jobs else {
        return;
    };
    let job = |id: &str| labels([("job_id", id)]);
    family(
        r,
        "pgtenure_table_job_last_tick_age_seconds",
        "Seconds since the tick the job last claimed was due, by the database clock",
        rows.iter()
            .map(|j| (job(&j.job_id), -s.seconds_until(j.tick))),
    );
    family(
        r,
        "pgtenure_table_job_busy",
        "1 while the job's last run keeps it busy, else 0",
        rows.iter().map(|j| (job(&j.job_id), f64::from(j.busy))),
    );
}

/// The semaphores table's families, when it was read: counts, and a series per key for the
/// `--max-series` keys with the most live permits (no owner label: a key's permits are many).
fn semaphore_families(r: &Registry, s: &Snapshot) {
    let Some(sem) = &s.semaphores else {
        return;
    };
    gauge(
        r,
        "pgtenure_table_semaphore_keys",
        "Semaphore keys with a row, held or lapsed",
        sem.keys as f64,
    );
    gauge(
        r,
        "pgtenure_table_semaphore_permits_held",
        "Semaphore permits held now across every key, by the database clock",
        sem.held as f64,
    );
    let key = |k: &str| labels([("key", k)]);
    family(
        r,
        "pgtenure_table_semaphore_key_permits_held",
        "Permits held now of each key; only the --max-series keys with the most have a series",
        sem.busiest.iter().map(|k| (key(&k.key), k.held as f64)),
    );
    family(
        r,
        "pgtenure_table_semaphore_key_slots",
        "Slots of each key with a series: its highest slot ever taken plus one, the most permits \
         its holders have needed at once (the limit they ask for is not stored, and may be higher)",
        sem.busiest
            .iter()
            .map(|k| (key(&k.key), f64::from(k.slots))),
    );
    gauge(
        r,
        "pgtenure_table_semaphore_keys_unlisted",
        "Keys with held permits beyond --max-series, without a series of their own",
        s.unlisted_semaphores() as f64,
    );
}

/// Labels from (name, value) pairs.
fn labels<const N: usize>(pairs: [(&'static str, &str); N]) -> Labels {
    pairs
        .into_iter()
        .map(|(name, value)| (name, value.to_owned()))
        .collect()
}

/// Registers a gauge without labels holding `value`.
fn gauge(r: &Registry, name: &str, help: &str, value: f64) {
    let metric = Gauge::new(name, help).expect("a valid gauge");
    metric.set(value);
    r.register(Box::new(metric)).expect("registered once");
}

/// Registers a gauge family with a series for each (labels, value); every series has the same
/// label names. A family without series is left out of the scrape.
fn family(r: &Registry, name: &str, help: &str, series: impl IntoIterator<Item = (Labels, f64)>) {
    let mut series = series.into_iter().peekable();
    let Some((first, _)) = series.peek() else {
        return;
    };
    let names: Vec<&str> = first.iter().map(|(name, _)| *name).collect();
    let metric = GaugeVec::new(Opts::new(name, help), &names).expect("a valid gauge family");
    for (labels, value) in series {
        let values: Vec<&str> = labels.iter().map(|(_, value)| value.as_str()).collect();
        metric.with_label_values(&values).set(value);
    }
    r.register(Box::new(metric)).expect("registered once");
}
