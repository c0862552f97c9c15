//! What the database says of a table's schema: its version record, read back, and the version its
//! columns and companions show.

use super::kind::{Kind, Marker};
use crate::error::{Error, ErrorKind, Result};
use crate::table_name::TableName;

/// What the database says of a table's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// No such table.
    Absent,
    /// Its comment records this version.
    Recorded(u32),
    /// No record: the version its columns and companions show.
    Unrecorded(u32),
    /// Its comment records a version, but it lacks what a version up to that one added (a column
    /// dropped by hand, a companion table dropped): the version its columns and companions show.
    Incomplete {
        /// The version the record names.
        recorded: u32,
        /// The version its columns and companions show.
        columns: u32,
    },
}

impl Found {
    /// Reads the version statement's answer (`sql/schema/version.sql`) for `kind`.
    pub(crate) fn read(
        kind: Kind,
        table: &TableName,
        present: bool,
        comment: Option<&str>,
        columns: &[String],
        relations: &[String],
    ) -> Result<Found> {
        if !present {
            return Ok(Found::Absent);
        }
        let record = match comment {
            Some(comment) => read_record(table, comment)?,
            None => None,
        };
        let has = |m: &Marker| match m {
            Marker::Column(c) => columns.iter().any(|have| have == c),
            Marker::Relation(suffix) => relations.contains(&table.derived(suffix)),
        };
        // A newer build may have contracted the table (dropped what this one knows): its record
        // says who can use it, below.
        let newer = matches!(record, Some((Some(k), v, _)) if k == kind && v > kind.latest());
        // (A record of another kind is refused below, as such.)
        let this_kind = record.is_none_or(|(k, _, _)| k == Some(kind));
        if !newer && this_kind {
            check_base_columns(kind, table, record, columns)?;
        }
        if let Some((recorded, version, usable_from)) = record {
            check_usable(kind, table, recorded, version, usable_from)?;
            // Every mark of the versions up to the recorded one (a version that left none, an
            // index changed, is taken as the record says).
            let complete = kind
                .markers()
                .iter()
                .filter(|(at, _)| *at <= version)
                .all(|(_, m)| has(m));
            if !newer && !complete {
                return Ok(Found::Incomplete {
                    recorded: version,
                    columns: Found::from_marks(kind, version, &has),
                });
            }
            return Ok(Found::Recorded(version));
        }
        Ok(Found::Unrecorded(Found::from_marks(
            kind,
            kind.latest(),
            &has,
        )))
    }

    /// The version the marks of versions up to `upto` show.
    fn from_marks(kind: Kind, upto: u32, has: &dyn Fn(&Marker) -> bool) -> u32 {
        // The last version that left a mark, with every mark up to it there. A version that left
        // none (an index changed) counts only once a later one's mark is found.
        let mut version = 1;
        for v in 2..=upto {
            let marks: Vec<&Marker> = kind
                .markers()
                .iter()
                .filter(|(at, _)| *at == v)
                .map(|(_, m)| m)
                .collect();
            if !marks.iter().all(|m| has(m)) {
                break;
            }
            if !marks.is_empty() {
                version = v;
            }
        }
        version
    }

    pub(super) fn version(self) -> Option<u32> {
        match self {
            Found::Absent => None,
            Found::Recorded(v) | Found::Unrecorded(v) => Some(v),
            Found::Incomplete { columns, .. } => Some(columns),
        }
    }
}

/// Parses the version record in `comment` of `table`; a record whose numbers cannot be read is
/// refused with [`ErrorKind::Schema`].
fn read_record(table: &TableName, comment: &str) -> Result<Option<Record>> {
    parse_record(comment).map_err(|why| {
        Error::new(
            ErrorKind::Schema,
            format!(
                "the comment of table {table} looks like pgtenure's version record but \
                 {why} ({comment:?}); nothing was changed: restore the record pgtenure \
                 wrote, or remove it (COMMENT ON TABLE {} IS NULL) so that the version is \
                 read from the columns, and migrate (see docs/upgrading.md)",
                table.quoted()
            ),
        )
    })
}

/// Refuses a table that lacks a column every table of `kind` has: another table of that name, or
/// a column dropped by hand.
fn check_base_columns(
    kind: Kind,
    table: &TableName,
    record: Option<Record>,
    columns: &[String],
) -> Result<()> {
    let missing: Vec<&str> = kind
        .base_columns()
        .iter()
        .copied()
        .filter(|c| !columns.iter().any(|have| have == c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let recorded = match record {
        Some((_, v, _)) => format!(" (recorded at schema version {v})"),
        None => String::new(),
    };
    Err(Error::new(
        ErrorKind::Schema,
        format!(
            "table {table}{recorded} lacks the column{} {} that every pgtenure {} table \
             has: it is another table of that name (another application's?), or a column \
             was dropped by hand; nothing was changed: name another table for this handle, \
             or restore the column (see docs/upgrading.md)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            kind.name()
        ),
    ))
}

/// Refuses a table whose record names another kind (`recorded`), or says a newer build
/// contracted it past what this one can use.
fn check_usable(
    kind: Kind,
    table: &TableName,
    recorded: Option<Kind>,
    version: u32,
    usable_from: u32,
) -> Result<()> {
    if recorded != Some(kind) {
        let what = recorded.map_or("an unknown kind of", Kind::name);
        return Err(Error::new(
            ErrorKind::Schema,
            format!(
                "table {table} is recorded as pgtenure's {what} table (schema version \
                 {version}), not a {} table: name another table for this handle",
                kind.name()
            ),
        ));
    }
    if usable_from > kind.latest() {
        return Err(Error::new(
            ErrorKind::Schema,
            format!(
                "the {} table {table} is at schema version {version}, which a newer \
                 pgtenure changed so that builds before its version {usable_from} of this \
                 table cannot use it (this one knows {}): upgrade pgtenure",
                kind.name(),
                kind.latest()
            ),
        ));
    }
    Ok(())
}

/// Parses `pgtenure: <kind> table, schema version <n>[, usable by builds of version <m> and
/// later] …`: the kind (`None` when this build does not know it), the version, and the oldest
/// build that can use the table (1 when not said). `Ok(None)`: not a record (another comment);
/// `Err`: a record whose numbers cannot be read (a version out of range, negative, or missing),
/// which is neither taken at face value nor overwritten.
type Record = (Option<Kind>, u32, u32);
fn parse_record(comment: &str) -> std::result::Result<Option<Record>, String> {
    let number = |text: &str, what: &str| -> std::result::Result<(u32, usize), String> {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<u32>() {
            Ok(n) => Ok((n, digits.len())),
            Err(_) if digits.is_empty() => Err(format!("names no {what}")),
            Err(_) => Err(format!("its {what} {digits} is out of range")),
        }
    };
    let Some((kind, rest)) = comment
        .strip_prefix("pgtenure: ")
        .and_then(|rest| rest.split_once(" table, schema version "))
    else {
        return Ok(None);
    };
    let (version, len) = number(rest, "schema version")?;
    let usable_from = match rest[len..].strip_prefix(", usable by builds of version ") {
        Some(from) => number(from, "oldest usable version")?.0,
        None => 1,
    };
    Ok(Some((Kind::from_name(kind), version, usable_from)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_back() {
        let t = TableName::parse("s.t").unwrap();
        for kind in [Kind::TickClaims, Kind::Leases, Kind::Units] {
            let record = kind.record(&t, 7);
            let comment = record.split('\'').nth(1).unwrap();
            assert_eq!(parse_record(comment), Ok(Some((Some(kind), 7, 1))));
        }
        assert_eq!(parse_record("a table of mine"), Ok(None));
        assert_eq!(parse_record("pgtenure: my notes"), Ok(None));
        assert_eq!(
            parse_record("pgtenure: queue table, schema version 3"),
            Ok(Some((None, 3, 1)))
        );
        assert_eq!(
            parse_record("pgtenure: units table, schema version 12, usable by builds of version 9"),
            Ok(Some((Some(Kind::Units), 12, 9)))
        );
        // Numbers that cannot be read are neither believed nor overwritten.
        for bad in [
            "pgtenure: units table, schema version 99999999999",
            "pgtenure: units table, schema version -3",
            "pgtenure: units table, schema version ",
            "pgtenure: units table, schema version 5, usable by builds of version x",
        ] {
            assert!(parse_record(bad).is_err(), "{bad}");
        }
    }

    /// `kind`'s base columns and `c`.
    fn with_base(kind: Kind, c: &[&str]) -> Vec<String> {
        kind.base_columns()
            .iter()
            .chain(c)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    }

    #[test]
    fn versions_without_a_record_come_from_the_columns() {
        let t = TableName::parse("p").unwrap();
        let cols = |c: &[&str]| with_base(Kind::Processes, c);
        let found = |c: &[&str]| Found::read(Kind::Processes, &t, true, None, &cols(c), &[]);
        assert_eq!(found(&["process_id"]).unwrap(), Found::Unrecorded(1));
        assert_eq!(found(&["changes"]).unwrap(), Found::Unrecorded(2));
        assert_eq!(
            found(&["changes", "settled"]).unwrap(),
            Found::Unrecorded(3)
        );
        // A later column without an earlier one: the earlier step is still missing.
        assert_eq!(found(&["settled"]).unwrap(), Found::Unrecorded(1));
        let units =
            |c: &[&str]| Found::read(Kind::Units, &t, true, None, &with_base(Kind::Units, c), &[]);
        assert_eq!(units(&["slot"]).unwrap(), Found::Unrecorded(1));
        assert_eq!(units(&["removed"]).unwrap(), Found::Unrecorded(3));
        assert_eq!(units(&["removed", "token"]).unwrap(), Found::Unrecorded(4));
        let leases = TableName::parse("l").unwrap();
        let promotion = vec![leases.derived("promotion")];
        assert_eq!(
            Found::read(
                Kind::Leases,
                &leases,
                true,
                None,
                &with_base(Kind::Leases, &[]),
                &promotion
            )
            .unwrap(),
            Found::Unrecorded(2)
        );
        let managed = with_base(Kind::Leases, &["managed_token"]);
        assert_eq!(
            Found::read(Kind::Leases, &leases, true, None, &managed, &promotion).unwrap(),
            Found::Unrecorded(3)
        );
        assert_eq!(
            Found::read(Kind::Leases, &leases, true, None, &managed, &[]).unwrap(),
            Found::Unrecorded(1)
        );
    }

    #[test]
    fn a_record_is_checked_against_the_columns() {
        let t = TableName::parse("p").unwrap();
        // A record that says more than the table has: the columns tell.
        let v3 = Kind::Processes.record(&t, 3);
        let v3 = v3.split('\'').nth(1).unwrap();
        assert_eq!(
            Found::read(
                Kind::Processes,
                &t,
                true,
                Some(v3),
                &with_base(Kind::Processes, &["changes"]),
                &[]
            )
            .unwrap(),
            Found::Incomplete {
                recorded: 3,
                columns: 2
            }
        );
        // Units version 2 changed an index only: a table recorded at 2 is at 2.
        let units_v2 = Kind::Units.record(&t, 2);
        let units_v2 = units_v2.split('\'').nth(1).unwrap();
        assert_eq!(
            Found::read(
                Kind::Units,
                &t,
                true,
                Some(units_v2),
                &with_base(Kind::Units, &[]),
                &[]
            )
            .unwrap(),
            Found::Recorded(2)
        );
        // Another table of that name: refused, whether recorded or not.
        for comment in [None, Some(v3)] {
            let other = vec!["id".to_owned(), "name".to_owned()];
            let err = Found::read(Kind::Processes, &t, true, comment, &other, &[]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Schema);
            assert!(
                err.to_string().contains("lacks the columns process_id"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_table_contracted_past_this_build_is_refused() {
        let t = TableName::parse("u").unwrap();
        let newer =
            "pgtenure: units table, schema version 6, usable by builds of version 4 and later";
        assert_eq!(
            Found::read(Kind::Units, &t, true, Some(newer), &[], &[]).unwrap(),
            Found::Recorded(6)
        );
        let contracted = "pgtenure: units table, schema version 7, usable by builds of version 5";
        let err = Found::read(Kind::Units, &t, true, Some(contracted), &[], &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema);
        assert!(err.to_string().contains("upgrade pgtenure"), "{err}");
    }

    #[test]
    fn another_kinds_record_is_refused() {
        let t = TableName::parse("x").unwrap();
        let comment = Kind::Leases.record(&t, 2);
        let comment = comment.split('\'').nth(1).unwrap();
        let err = Found::read(Kind::TickClaims, &t, true, Some(comment), &[], &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Schema);
        assert!(err.to_string().contains("leases table"), "{err}");
    }
}
