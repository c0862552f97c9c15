//! The indexes, sequences and tables beside a table that its statements rely on, which a
//! migration makes and checks.

use crate::table_name::{render, TableName};

const CREATE_PROMOTION: &str = include_str!("../../sql/schema/create_promotion.sql");
const SEED_PROMOTION: &str = include_str!("../../sql/schema/seed_promotion.sql");

/// An index, sequence or table a table's statements rely on, by its quoted, schema-qualified name.
#[derive(Debug, Clone)]
pub(crate) struct Companion {
    pub(crate) name: String,
    pub(crate) kind: CompanionKind,
    /// The statements that make it when the table exists without it (a companion added in a later
    /// version); empty for those the table's own statements make.
    pub(crate) create: Vec<String>,
}

/// What a [`Companion`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CompanionKind {
    /// An index on the table.
    Index,
    /// A sequence the statements draw tokens from.
    Sequence,
    /// A table the statements read and write beside it.
    Table,
}

impl CompanionKind {
    pub(super) fn noun(self) -> &'static str {
        match self {
            CompanionKind::Index => "index",
            CompanionKind::Sequence => "sequence",
            CompanionKind::Table => "table",
        }
    }
}

impl Companion {
    /// An index `create` makes (`CREATE INDEX IF NOT EXISTS`), again when dropped by hand: the
    /// statements work without it, only slower, so a migration makes it rather than fail.
    pub(crate) fn index(name: String, create: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Index,
            create: vec![create],
        }
    }

    pub(crate) fn sequence(name: String) -> Companion {
        Companion {
            name,
            kind: CompanionKind::Sequence,
            create: Vec::new(),
        }
    }

    /// The record of the last promotion `table`'s grants saw (`sql/schema/create_promotion.sql`),
    /// made with its one row when missing, so tables made before it get it from `create_table`.
    /// The row starts at the server's timeline when `fold`
    /// ([`Db::timeline_tokens`](crate::Db::timeline_tokens)).
    pub(crate) fn promotion(table: &TableName, fold: bool) -> Companion {
        let fold = if fold { "true" } else { "false" };
        Companion {
            name: table.derived("promotion"),
            kind: CompanionKind::Table,
            create: vec![
                render(CREATE_PROMOTION, table),
                render(SEED_PROMOTION, table).replace("{fold}", fold),
            ],
        }
    }
}
