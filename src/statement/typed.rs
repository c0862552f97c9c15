//! What a statement's text and parameter types decide: the check of its `$n` when the statement is
//! built, and at its first use the name it is prepared under and its SQL-level `PREPARE` (hashing
//! every statement of a handle when the handle is made would cost more than the handle's first
//! call).

use std::fmt::Write as _;

use postgres::types::Type;
use sha2::{Digest, Sha256};

use super::literal::renderable;

/// What a statement's parameter types decide.
#[derive(Debug)]
pub(super) struct Typed {
    pub(super) types: &'static [Type],
    /// `pgt_` and 32 hex digits of the SHA-256 of the types and the text.
    pub(super) name: String,
    /// The same 16 bytes of the digest as a number: the statement's key in a connection's cache
    /// (as unique as the name, without hashing a string per call).
    pub(super) key: u128,
    /// `PREPARE name (types) AS text`, or `None` when a parameter type cannot be written as a
    /// literal (then the statement is always sent unprepared).
    pub(super) prepare: Option<String>,
}

impl Typed {
    /// What `types` decide for `text` (checked with [`check`] when the statement was built).
    pub(super) fn new(text: &str, types: &'static [Type]) -> Typed {
        let mut hash = Sha256::new();
        for ty in types {
            hash.update(ty.oid().to_be_bytes());
        }
        hash.update([0]);
        hash.update(text.as_bytes());
        let digest = hash.finalize();
        let mut bytes = [0; 16];
        bytes.copy_from_slice(&digest[..16]);
        let mut name = String::from("pgt_");
        for byte in bytes {
            let _ = write!(name, "{byte:02x}");
        }
        let prepare = types.iter().all(renderable).then(|| {
            let list: Vec<String> = types
                .iter()
                .map(|ty| format!("pg_catalog.{}", ty.name()))
                .collect();
            if list.is_empty() {
                format!("PREPARE {name} AS {text}")
            } else {
                format!("PREPARE {name} ({}) AS {text}", list.join(", "))
            }
        });
        Typed {
            types,
            name,
            key: u128::from_be_bytes(bytes),
            prepare,
        }
    }
}

/// Checks that `text`'s highest `$n` is the number of `types`.
///
/// # Panics
///
/// When it is not: a statement declared with the wrong parameters (every module's unit tests build
/// all its statements, so this never ships).
pub(super) fn check(text: &str, types: &[Type]) {
    assert_eq!(
        highest_parameter(text),
        types.len(),
        "parameter types do not match the statement:\n{text}"
    );
}

/// The highest `$n` in `text` (comments included: they list the parameters).
fn highest_parameter(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut highest = 0;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'$' {
            let digits: String = bytes[i + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .map(|d| *d as char)
                .collect();
            highest = highest.max(digits.parse().unwrap_or(0));
        }
    }
    highest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_content_addressed_by_text_and_types() {
        let a = Typed::new("SELECT $1", &[Type::TEXT]);
        let same = Typed::new("SELECT $1", &[Type::TEXT]);
        let other_type = Typed::new("SELECT $1", &[Type::INT8]);
        let other_text = Typed::new("SELECT $1 ", &[Type::TEXT]);
        assert_eq!(a.name, same.name);
        assert_eq!(a.key, same.key);
        assert_ne!(a.name, other_type.name);
        assert_ne!(a.key, other_type.key);
        assert_ne!(a.name, other_text.name);
        assert!(a.name.starts_with("pgt_") && a.name.len() == 36);
        assert_eq!(format!("pgt_{:032x}", a.key), a.name);
        assert!(a.name.len() <= 63, "PostgreSQL truncates longer names");
        assert_eq!(
            a.prepare.as_deref(),
            Some(format!("PREPARE {} (pg_catalog.text) AS SELECT $1", a.name).as_str())
        );
    }

    #[test]
    fn statements_without_literal_types_are_never_prepared() {
        let s = Typed::new("SELECT $1", &[Type::UUID]);
        assert!(s.prepare.is_none());
        assert_eq!(highest_parameter("SELECT $12, $3 -- $1"), 12);
        assert_eq!(highest_parameter("SELECT 1"), 0);
    }

    #[test]
    #[should_panic(expected = "parameter types do not match the statement")]
    fn a_statement_with_other_parameters_than_its_types_is_refused() {
        check("SELECT $1, $2", &[Type::TEXT]);
    }
}
