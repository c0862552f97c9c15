//! Reading the database's answer: every column pgtenure reads goes through [`Read`], which returns
//! an [`Error`] instead of panicking (whatever the database answers is input, and no answer may panic).
//!
//! A column of another type than the statement expects (a DBA's `ALTER TABLE`, a migration gone
//! wrong, a version skew in a rolling upgrade), a column missing from the answer, or a NULL where a
//! value is expected becomes an [`ErrorKind::Database`] error (so
//! [permanent](Error::is_permanent): the loops do not retry it blindly) whose `Display` names the
//! operation, the table, the column, the type found and the type expected, with what to do; the
//! driver's own error is its `source()`.

use std::error::Error as StdError;
use std::fmt;
use std::time::SystemTime;

use postgres::types::{FromSql, Type, WasNull};
use postgres::Row;

use crate::error::{Error, ErrorKind, Result};
use crate::observe;

/// A Rust type a column is read into, with the PostgreSQL type pgtenure's statements give it (for
/// the error when the answer has another).
pub(crate) trait Column<'r>: FromSql<'r> {
    /// The PostgreSQL type expected, as `format_type` names it (`bigint`, `text[]`).
    const EXPECTED: &'static str;
}

macro_rules! column {
    ($($rust:ty => $sql:literal),* $(,)?) => {
        $(impl Column<'_> for $rust {
            const EXPECTED: &'static str = $sql;
        })*
    };
}

column! {
    bool => "boolean",
    i32 => "integer",
    i64 => "bigint",
    f64 => "double precision",
    String => "text",
    SystemTime => "timestamptz",
    Vec<String> => "text[]",
    Vec<i64> => "bigint[]",
    Vec<bool> => "boolean[]",
}

impl<'r> Column<'r> for &'r str {
    const EXPECTED: &'static str = "text";
}

impl<'r, T: Column<'r>> Column<'r> for Option<T> {
    const EXPECTED: &'static str = T::EXPECTED;
}

/// What to do when a column cannot be read: it depends on who made what was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    /// One of pgtenure's tables (the migrations, or undoing a change, fix it).
    Table,
    /// The server's own answer (a function, a catalog): no table of pgtenure's is involved.
    Server,
}

/// One row of an answer, read column by column for an operation (`context`, "acquire lease") on a
/// table: each read returns the value or the error that says which column of which table holds
/// what.
pub(crate) struct Read<'r> {
    row: &'r Row,
    context: &'r str,
    table: &'r dyn fmt::Display,
    made: Made,
}

impl<'r> Read<'r> {
    /// A row a statement over `table` (one of pgtenure's, as the statement names it) answered.
    pub(crate) fn new(row: &'r Row, context: &'r str, table: &'r dyn fmt::Display) -> Read<'r> {
        Read {
            row,
            context,
            table,
            made: Made::Table,
        }
    }

    /// A row the server answered about itself (`what`: "the session probe", "pg_class").
    pub(crate) fn server(row: &'r Row, context: &'r str, what: &'r dyn fmt::Display) -> Read<'r> {
        Read {
            row,
            context,
            table: what,
            made: Made::Server,
        }
    }

    /// The column `name` as a `T`.
    pub(crate) fn column<T: Column<'r>>(&self, name: &str) -> Result<T> {
        match self.row.columns().iter().position(|c| c.name() == name) {
            // The label is written only for an error (not at every read of every operation).
            Some(index) => self.read(index, || format!("{name:?}")),
            // The driver's own error for an absent column is the cause.
            None => {
                let cause = self.row.try_get::<_, T>(name).err();
                Err(self.error::<T>(&format!("{name:?}"), &Found::Missing, cause))
            }
        }
    }

    /// The column at `index` (0-based) as a `T`, for a statement whose column has no name of its
    /// own.
    pub(crate) fn at<T: Column<'r>>(&self, index: usize) -> Result<T> {
        match self.row.columns().get(index) {
            Some(column) => self.read(index, || format!("{} ({:?})", index + 1, column.name())),
            None => {
                let cause = self.row.try_get::<_, T>(index).err();
                Err(self.error::<T>(&format!("{}", index + 1), &Found::Missing, cause))
            }
        }
    }

    /// The column at `index`, which the answer has, named `label()` in the error.
    fn read<T: Column<'r>>(&self, index: usize, label: impl FnOnce() -> String) -> Result<T> {
        match self.row.try_get::<_, T>(index) {
            Ok(value) => Ok(value),
            Err(e) => {
                let ty = self.row.columns()[index].type_();
                let found = if StdError::source(&e).is_some_and(|s| s.is::<WasNull>()) {
                    Found::Null
                } else if !T::accepts(ty) {
                    Found::Type(ty)
                } else {
                    Found::Unreadable(ty)
                };
                Err(self.error::<T>(&label(), &found, Some(e)))
            }
        }
    }

    fn error<T: Column<'r>>(
        &self,
        label: &str,
        found: &Found<'_>,
        cause: Option<postgres::Error>,
    ) -> Error {
        observe::statement_error("driver");
        let expected = T::EXPECTED;
        let what = match found {
            Found::Missing => format!("is missing from the answer, pgtenure expects {expected}"),
            Found::Type(ty) => format!("is {}, pgtenure expects {expected}", sql_name(ty)),
            Found::Null => format!("is NULL, pgtenure expects {expected} (never NULL)"),
            Found::Unreadable(ty) => format!(
                "is {} as expected but holds a value pgtenure cannot read as {expected}",
                sql_name(ty)
            ),
        };
        let of = match self.made {
            Made::Table => format!("of table {}", self.table),
            Made::Server => format!("of {}", self.table),
        };
        let advice = match (self.made, found) {
            (Made::Table, Found::Unreadable(_)) => {
                "pgtenure did not write that value: correct the row, or undo the change to the \
                 table"
            }
            (Made::Table, _) => {
                "the table is not as this version of pgtenure makes it: run the migrations \
                 (pgtenure::migrate or `pgtenure migrate`; see docs/upgrading.md) or undo the \
                 change to the table"
            }
            (Made::Server, _) => {
                "the server answered in a way pgtenure does not expect (a PostgreSQL version or \
                 a fork it does not support?)"
            }
        };
        let message = format!(
            "{} failed: column {label} {of} {what}; {advice} (the statement ran: anything \
             it wrote stands)",
            self.context
        );
        let error = Error::new(ErrorKind::Database, message);
        match cause {
            Some(cause) => error.with_source(cause),
            None => error,
        }
    }
}

/// What the answer had where a value was expected.
enum Found<'a> {
    /// No such column.
    Missing,
    /// A column of this type, which the read does not accept.
    Type(&'a Type),
    /// NULL (in a column of an accepted type) where a value is expected.
    Null,
    /// A value of an accepted type that did not convert (invalid UTF-8 text, say).
    Unreadable(&'a Type),
}

/// A type as `format_type` spells the common ones (`bigint`, not `int8`; `text[]`, not `_text`).
fn sql_name(ty: &Type) -> String {
    let name = match *ty {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::VARCHAR => "character varying",
        Type::BPCHAR => "character",
        Type::TIMESTAMP => "timestamp",
        _ => {
            if let postgres::types::Kind::Array(element) = ty.kind() {
                return format!("{}[]", sql_name(element));
            }
            return ty.name().to_owned();
        }
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_named_as_format_type_names_them() {
        assert_eq!(sql_name(&Type::INT8), "bigint");
        assert_eq!(sql_name(&Type::NUMERIC), "numeric");
        assert_eq!(sql_name(&Type::TEXT_ARRAY), "text[]");
        assert_eq!(sql_name(&Type::INT8_ARRAY), "bigint[]");
        assert_eq!(sql_name(&Type::TIMESTAMPTZ), "timestamptz");
        assert_eq!(<Option<i64> as Column<'_>>::EXPECTED, "bigint");
    }
}
