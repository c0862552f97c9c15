//! What each kind of pgtenure table is: its versions, the statements that create it and step it
//! from one version to the next, and what each version left to recognise it by.

use super::companion::Companion;
use crate::table_name::{render, TableName};

const TICKS_CREATE: &str = include_str!("../../sql/tick_claims/create_table.sql");
const TICKS_2: &str = include_str!("../../sql/tick_claims/upgrade_2.sql");
const FIRES_CREATE: &str = include_str!("../../sql/fire_claims/create_table.sql");
const FIRES_INDEX: &str = include_str!("../../sql/fire_claims/create_index.sql");
const FIRES_2: &str = include_str!("../../sql/fire_claims/upgrade_2.sql");
const LEASES_SEQUENCE: &str = include_str!("../../sql/leases/create_sequence.sql");
const LEASES_CREATE: &str = include_str!("../../sql/leases/create_table.sql");
const LEASES_3: &str = include_str!("../../sql/leases/upgrade_3.sql");
const LEADER_SEQUENCE: &str = include_str!("../../sql/elector/create_sequence.sql");
const LEADER_CREATE: &str = include_str!("../../sql/elector/create_table.sql");
const LEADER_2: &str = include_str!("../../sql/elector/upgrade_2.sql");
const PROCESSES_CREATE: &str = include_str!("../../sql/membership/create_processes.sql");
const PROCESSES_2: &str = include_str!("../../sql/membership/upgrade_processes_2.sql");
const PROCESSES_3: &str = include_str!("../../sql/membership/upgrade_processes_3.sql");
const UNITS_CREATE: &str = include_str!("../../sql/membership/create_units.sql");
const UNITS_SEQUENCE: &str = include_str!("../../sql/membership/create_sequence.sql");
const UNITS_OWNER_INDEX: &str = include_str!("../../sql/membership/create_owner_index.sql");
const UNITS_CLAIMABLE_INDEX: &str = include_str!("../../sql/membership/create_claimable_index.sql");
const UNITS_2: &str = include_str!("../../sql/membership/upgrade_units_2.sql");
const UNITS_3: &str = include_str!("../../sql/membership/upgrade_units_3.sql");
const UNITS_4: &str = include_str!("../../sql/membership/upgrade_units_4.sql");
const UNITS_OWN_SEQUENCE: &str = include_str!("../../sql/membership/own_sequence.sql");
const SEMAPHORES_SEQUENCE: &str = include_str!("../../sql/semaphores/create_sequence.sql");
const SEMAPHORES_CREATE: &str = include_str!("../../sql/semaphores/create_table.sql");
const CREATE_PROMOTION: &str = include_str!("../../sql/schema/create_promotion.sql");
const SEED_PROMOTION: &str = include_str!("../../sql/schema/seed_promotion.sql");

/// What a table is to pgtenure, as its version record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    TickClaims,
    FireClaims,
    Leases,
    Elector,
    Processes,
    Units,
    Semaphores,
}

/// Something a version added, found in a table without a version record.
pub(super) enum Marker {
    Column(&'static str),
    /// A relation named after the table (`TableName::derived`).
    Relation(&'static str),
}

impl Kind {
    /// The name in the version record and in [`Plan::kind`].
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::TickClaims => "tick_claims",
            Kind::FireClaims => "fire_claims",
            Kind::Leases => "leases",
            Kind::Elector => "leader",
            Kind::Processes => "processes",
            Kind::Units => "units",
            Kind::Semaphores => "semaphores",
        }
    }

    pub(super) fn from_name(name: &str) -> Option<Kind> {
        [
            Kind::TickClaims,
            Kind::FireClaims,
            Kind::Leases,
            Kind::Elector,
            Kind::Processes,
            Kind::Units,
            Kind::Semaphores,
        ]
        .into_iter()
        .find(|k| k.name() == name)
    }

    /// The version this build makes and migrates to.
    pub(crate) fn latest(self) -> u32 {
        match self {
            Kind::Semaphores => 1,
            Kind::TickClaims | Kind::FireClaims => 2,
            Kind::Leases | Kind::Elector | Kind::Processes => 3,
            Kind::Units => 4,
        }
    }

    /// The oldest version this build's statements work with. A release that adds a column its
    /// statements can do without (expand) keeps this below [`Kind::latest`] for a release.
    pub(crate) fn needed(self) -> u32 {
        self.latest()
    }

    /// The oldest build (by the version it migrates to) whose statements still work on a table
    /// at [`Kind::latest`]: every step so far only added, so 1. A release that contracts (drops
    /// or changes what older builds read) raises it, and older builds then refuse the table.
    pub(super) fn usable_from(self) -> u32 {
        1
    }

    /// The statements that make the table at its latest version, and what it needs beside it.
    pub(super) fn create(self, table: &TableName, fold: bool) -> Vec<String> {
        let on = |sql: &str| render(sql, table);
        match self {
            Kind::TickClaims => vec![on(TICKS_CREATE)],
            Kind::FireClaims => vec![on(FIRES_CREATE), on(FIRES_INDEX)],
            Kind::Leases => [
                vec![on(LEASES_SEQUENCE), on(LEASES_CREATE)],
                promotion(table, fold),
            ]
            .concat(),
            Kind::Elector => [
                vec![on(LEADER_SEQUENCE), on(LEADER_CREATE)],
                promotion(table, fold),
            ]
            .concat(),
            Kind::Processes => vec![on(PROCESSES_CREATE)],
            Kind::Semaphores => [
                vec![on(SEMAPHORES_SEQUENCE), on(SEMAPHORES_CREATE)],
                promotion(table, fold),
            ]
            .concat(),
            Kind::Units => vec![
                on(UNITS_CREATE),
                on(UNITS_SEQUENCE),
                on(UNITS_OWNER_INDEX),
                on(UNITS_CLAIMABLE_INDEX),
            ],
        }
    }

    /// The statements that take the table from `version - 1` to `version`.
    pub(super) fn step(self, version: u32, table: &TableName, fold: bool) -> Vec<String> {
        let on = |sql: &str| render(sql, table);
        match (self, version) {
            (Kind::TickClaims, 2) => vec![on(TICKS_2)],
            (Kind::FireClaims, 2) => vec![on(FIRES_2)],
            (Kind::Leases, 2) | (Kind::Elector, 3) => promotion(table, fold),
            (Kind::Leases, 3) => vec![on(LEASES_3)],
            (Kind::Elector, 2) => vec![on(LEADER_2)],
            (Kind::Processes, 2) => vec![on(PROCESSES_2)],
            (Kind::Processes, 3) => vec![on(PROCESSES_3)],
            (Kind::Units, 2) => vec![on(UNITS_2)],
            (Kind::Units, 3) => vec![on(UNITS_3)],
            (Kind::Units, 4) => vec![on(UNITS_4), on(UNITS_SEQUENCE), on(UNITS_OWN_SEQUENCE)],
            _ => Vec::new(),
        }
    }

    /// The columns every version of the table has had (version 1's): a table without one of them
    /// is not this kind of pgtenure table, or a column was dropped by hand.
    pub(super) fn base_columns(self) -> &'static [&'static str] {
        match self {
            Kind::TickClaims => &["job_id", "tick", "busy_until", "owner", "token"],
            Kind::FireClaims => &["fire_key", "holder", "claimed_at", "expires_at"],
            Kind::Leases => &[
                "key",
                "owner",
                "held_until",
                "token",
                "superseded",
                "acquired_at",
            ],
            Kind::Elector => &["name", "holder", "expires_at", "term", "elected_at"],
            Kind::Processes => &[
                "process_id",
                "expires_at",
                "unit_count",
                "weight",
                "hostname",
                "version",
                "started_at",
            ],
            Kind::Semaphores => &[
                "key",
                "slot",
                "owner",
                "held_until",
                "token",
                "superseded",
                "acquired_at",
                "managed_token",
            ],
            Kind::Units => &[
                "tenant",
                "shard",
                "process_id",
                "claimed_at",
                "weight",
                "slot",
            ],
        }
    }

    /// What each version added that shows in a table without a record.
    pub(super) fn markers(self) -> &'static [(u32, Marker)] {
        match self {
            Kind::TickClaims | Kind::FireClaims => &[(2, Marker::Column("claim_id"))],
            Kind::Leases => &[
                (2, Marker::Relation("promotion")),
                (3, Marker::Column("managed_token")),
            ],
            Kind::Elector => &[
                (2, Marker::Column("resign_requested")),
                (3, Marker::Relation("promotion")),
            ],
            Kind::Processes => &[
                (2, Marker::Column("changes")),
                (3, Marker::Column("settled")),
            ],
            Kind::Semaphores => &[],
            // Version 2 changed an index's columns: nothing a statement fails without.
            Kind::Units => &[(3, Marker::Column("removed")), (4, Marker::Column("token"))],
        }
    }

    /// The relations [`Kind::markers`] name, as the version statement's `$2`.
    pub(crate) fn marker_relations(self, table: &TableName) -> Vec<String> {
        self.markers()
            .iter()
            .filter_map(|(_, m)| match m {
                Marker::Relation(suffix) => Some(table.derived(suffix)),
                Marker::Column(_) => None,
            })
            .collect()
    }

    /// The indexes, sequences and tables the statements rely on, checked after every migration;
    /// an index or a promotion record dropped by hand is made again (a sequence is not: its
    /// tokens would start again from 1).
    pub(crate) fn companions(self, table: &TableName, fold: bool) -> Vec<Companion> {
        match self {
            Kind::TickClaims | Kind::Processes => Vec::new(),
            Kind::FireClaims => vec![Companion::index(
                table.derived("expires_at"),
                render(FIRES_INDEX, table),
            )],
            Kind::Leases => vec![
                Companion::sequence(table.derived("token_seq")),
                Companion::promotion(table, fold),
            ],
            Kind::Semaphores => vec![
                Companion::sequence(table.derived("token_seq")),
                Companion::promotion(table, fold),
            ],
            Kind::Elector => vec![
                Companion::sequence(table.derived("term_seq")),
                Companion::promotion(table, fold),
            ],
            Kind::Units => vec![
                Companion::index(table.derived("owner"), render(UNITS_OWNER_INDEX, table)),
                Companion::index(
                    table.derived("claimable"),
                    render(UNITS_CLAIMABLE_INDEX, table),
                ),
                Companion::sequence(table.derived("token_seq")),
            ],
        }
    }

    /// The version record, as the table's comment.
    pub(super) fn record(self, table: &TableName, version: u32) -> String {
        format!(
            "COMMENT ON TABLE {} IS 'pgtenure: {} table, schema version {version}, usable by \
             builds of version {} and later (written by pgtenure migrate; keep it: see \
             docs/upgrading.md)'",
            table.quoted(),
            self.name(),
            self.usable_from()
        )
    }
}

fn promotion(table: &TableName, fold: bool) -> Vec<String> {
    let fold = if fold { "true" } else { "false" };
    vec![
        render(CREATE_PROMOTION, table),
        render(SEED_PROMOTION, table).replace("{fold}", fold),
    ]
}
