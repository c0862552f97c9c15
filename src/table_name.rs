//! Table identifiers: the only text ever substituted into pgtenure's SQL.
//!
//! A name is one plain identifier or `schema.table`, each part matching
//! `^[A-Za-z_][A-Za-z0-9_]{0,62}$` (PostgreSQL truncates identifiers at 63 bytes, so a longer part
//! would silently name another table). It is always double-quoted when substituted, so its case is
//! kept and it can never be read as SQL.

use std::fmt;

use crate::error::{Error, Result};

/// Longest identifier part PostgreSQL keeps without truncating (NAMEDATALEN - 1).
const MAX_IDENT_BYTES: usize = 63;

/// A validated, quoted table name.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct TableName {
    schema: Option<String>,
    name: String,
}

impl TableName {
    /// Validates `raw` as `table` or `schema.table`.
    pub(crate) fn parse(raw: &str) -> Result<TableName> {
        let mut parts = raw.split('.');
        let first = parts.next().unwrap_or_default();
        let second = parts.next();
        if parts.next().is_some() {
            return Err(Error::invalid_input(format!(
                "table name {raw:?} has more than two parts; use `table` or `schema.table`"
            )));
        }
        let (schema, name) = match second {
            Some(table) => (Some(first), table),
            None => (None, first),
        };
        if let Some(schema) = schema {
            check_part(raw, schema)?;
        }
        check_part(raw, name)?;
        Ok(TableName {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        })
    }

    /// The name as SQL: each part double-quoted (`"schema"."table"`).
    pub(crate) fn quoted(&self) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".\"{}\"", self.name),
            None => format!("\"{}\"", self.name),
        }
    }

    /// A quoted, schema-qualified name for an object (a sequence) that belongs to this table: the
    /// table name with `_suffix`, shortened to fit 63 bytes with a hash that keeps it unique.
    pub(crate) fn derived(&self, suffix: &str) -> String {
        match &self.schema {
            Some(schema) => format!("\"{schema}\".{}", self.derived_unqualified(suffix)),
            None => self.derived_unqualified(suffix),
        }
    }

    /// Like [`TableName::derived`] without the schema, as `CREATE INDEX` wants its index name.
    pub(crate) fn derived_unqualified(&self, suffix: &str) -> String {
        let mut base = format!("{}_{suffix}", self.name);
        if base.len() > MAX_IDENT_BYTES {
            let tail = format!("_{suffix}_{:08x}", fnv1a(base.as_bytes()));
            // The name is ASCII (validated), so any byte index is a char boundary.
            let keep = MAX_IDENT_BYTES
                .saturating_sub(tail.len())
                .min(self.name.len());
            base = format!("{}{tail}", &self.name[..keep]);
        }
        format!("\"{base}\"")
    }
}

impl TableName {
    /// The `LISTEN`/`NOTIFY` channel on which the statements that free a key or a fleet of this
    /// table tell the handover listeners (`pgtenure:` and the name; over 63 bytes, cut with a hash
    /// that keeps it unique). The same in every process and version: it is a wire name.
    pub(crate) fn channel(&self) -> String {
        let whole = format!("pgtenure:{self}");
        if whole.len() <= MAX_IDENT_BYTES {
            return whole;
        }
        let tail = format!("_{:08x}", fnv1a(whole.as_bytes()));
        // ASCII (validated), so any byte index is a char boundary.
        format!("{}{tail}", &whole[..MAX_IDENT_BYTES - tail.len()])
    }
}

impl fmt::Debug for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted())
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

fn check_part(raw: &str, part: &str) -> Result<()> {
    if part.is_empty() {
        return Err(Error::invalid_input(format!(
            "table name {raw:?} has an empty part; use `table` or `schema.table`"
        )));
    }
    if part.len() > MAX_IDENT_BYTES {
        return Err(Error::invalid_input(format!(
            "table name {raw:?} has a part of {} bytes; PostgreSQL keeps at most {MAX_IDENT_BYTES}",
            part.len()
        )));
    }
    let mut bytes = part.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(Error::invalid_input(format!(
            "table name {raw:?} is not a plain identifier: use ASCII letters, digits and `_`, \
             not starting with a digit"
        )));
    }
    Ok(())
}

/// Substitutes the table (and names derived from it) into a statement from `sql/`.
///
/// `{table}` becomes the quoted table name, `{table:SUFFIX}` the quoted, schema-qualified name of an
/// object derived from it and `{index:SUFFIX}` the same without the schema (see
/// [`TableName::derived`]). Nothing else is ever substituted; other braces are left as they are.
pub(crate) fn render(sql: &str, table: &TableName) -> String {
    render_tables(sql, &[("table", table)])
}

/// Like [`render`] for a statement over several tables, each named by its placeholder (`{units}`,
/// `{processes:SUFFIX}`); `{index:SUFFIX}` derives from the first.
pub(crate) fn render_tables(sql: &str, tables: &[(&str, &TableName)]) -> String {
    let lookup = |name: &str| tables.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
    let mut out = String::with_capacity(sql.len() + 64);
    let mut rest = sql;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let Some(end) = after.find('}') else {
            out.push_str(after);
            return out;
        };
        let placeholder = &after[..=end];
        let inner = &placeholder[1..end];
        let (name, suffix) = match inner.split_once(':') {
            Some((name, suffix)) => (name, Some(suffix)),
            None => (inner, None),
        };
        let first = tables.first().map(|(_, t)| *t);
        match (name, suffix) {
            ("index", Some(suffix)) => match first {
                Some(t) => out.push_str(&t.derived_unqualified(suffix)),
                None => out.push_str(placeholder),
            },
            (name, suffix) => match (lookup(name), suffix) {
                (Some(t), None) => out.push_str(&t.quoted()),
                (Some(t), Some(suffix)) => out.push_str(&t.derived(suffix)),
                (None, _) => out.push_str(placeholder),
            },
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// 32-bit FNV-1a: a stable hash for shortening derived names (not for security).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_fits_an_identifier_and_stays_unique() {
        let short = TableName::parse("ops.leases").unwrap();
        assert_eq!(short.channel(), "pgtenure:ops.leases");
        let a = TableName::parse(&format!("{}.{}", "s".repeat(63), "a".repeat(63))).unwrap();
        let b = TableName::parse(&format!("{}.{}", "s".repeat(63), "b".repeat(63))).unwrap();
        assert_eq!(a.channel().len(), 63);
        assert_ne!(a.channel(), b.channel());
    }

    #[test]
    fn accepts_plain_and_schema_qualified_names() {
        assert_eq!(TableName::parse("claims").unwrap().quoted(), "\"claims\"");
        assert_eq!(TableName::parse("_x9").unwrap().quoted(), "\"_x9\"");
        assert_eq!(
            TableName::parse("Ops.Tick_Claims").unwrap().quoted(),
            "\"Ops\".\"Tick_Claims\""
        );
        let max = "a".repeat(63);
        assert!(TableName::parse(&max).is_ok());
        assert!(TableName::parse(&format!("{max}.{max}")).is_ok());
    }

    #[test]
    fn refuses_everything_that_is_not_a_plain_identifier() {
        let too_long = "a".repeat(64);
        for bad in [
            "",
            " ",
            "x; drop table y",
            "\"a\"",
            "a.b.c",
            too_long.as_str(),
            "1abc",
            "a-b",
            "a b",
            "a.",
            ".a",
            "tablé",
            "a\0b",
            "a'b",
        ] {
            let err = TableName::parse(bad).expect_err(bad);
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
    }

    #[test]
    fn derived_names_fit_and_stay_distinct() {
        let short = TableName::parse("s.leases").unwrap();
        assert_eq!(short.derived("token_seq"), "\"s\".\"leases_token_seq\"");
        let a = TableName::parse(&format!("{}a", "x".repeat(62))).unwrap();
        let b = TableName::parse(&format!("{}b", "x".repeat(62))).unwrap();
        let (da, db) = (a.derived("token_seq"), b.derived("token_seq"));
        assert_ne!(da, db);
        assert!(da.trim_matches('"').len() <= 63, "{da}");
    }

    #[test]
    fn render_tables_substitutes_each_named_table() {
        let units = TableName::parse("ops.units").unwrap();
        let processes = TableName::parse("procs").unwrap();
        let sql =
            "UPDATE {units} u FROM {processes} p; {index:owner} {units:seq} {other} {processes";
        assert_eq!(
            render_tables(sql, &[("units", &units), ("processes", &processes)]),
            "UPDATE \"ops\".\"units\" u FROM \"procs\" p; \"units_owner\" \"ops\".\"units_seq\" {other} {processes"
        );
    }

    #[test]
    fn render_substitutes_only_table_placeholders() {
        let t = TableName::parse("s.t").unwrap();
        let sql = "select '{x}' from {table} JOIN {table:seq} ON {table}.a = $1; {index:i} {tab";
        assert_eq!(
            render(sql, &t),
            "select '{x}' from \"s\".\"t\" JOIN \"s\".\"t_seq\" ON \"s\".\"t\".a = $1; \"t_i\" {tab"
        );
    }
}
