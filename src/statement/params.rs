//! The Rust types an operation binds, each with the built-in PostgreSQL type it is sent as, so an
//! operation's parameter types are its function's argument types and nothing else.

use std::time::SystemTime;

use postgres::types::{ToSql, Type};

/// A bind value, typed by its statement.
pub(crate) type Value<'a> = &'a (dyn ToSql + Sync);

/// A Rust value bound as one built-in PostgreSQL type (parameter types stay built-in,
/// so the driver never looks a type up with statements of its own).
pub(crate) trait Param: ToSql + Sync {
    /// The type it is bound as.
    const TYPE: Type;
}

macro_rules! param {
    ($($rust:ty => $sql:ident),* $(,)?) => {
        $(impl Param for $rust {
            const TYPE: Type = Type::$sql;
        })*
    };
}

param! {
    bool => BOOL,
    i32 => INT4,
    i64 => INT8,
    &str => TEXT,
    String => TEXT,
    SystemTime => TIMESTAMPTZ,
    &[&str] => TEXT_ARRAY,
    Vec<&str> => TEXT_ARRAY,
    &Vec<&str> => TEXT_ARRAY,
    &[String] => TEXT_ARRAY,
    Vec<String> => TEXT_ARRAY,
    &Vec<String> => TEXT_ARRAY,
    &[i32] => INT4_ARRAY,
    Vec<i32> => INT4_ARRAY,
    &Vec<i32> => INT4_ARRAY,
    &[i64] => INT8_ARRAY,
    Vec<i64> => INT8_ARRAY,
    &Vec<i64> => INT8_ARRAY,
}

/// `NULL` when `None`.
impl<T: Param> Param for Option<T> {
    const TYPE: Type = T::TYPE;
}

/// An operation's parameters `$1 … $n`, in bind order: a tuple of [`Param`]s.
pub(crate) trait Params {
    /// The parameter types, in order.
    const TYPES: &'static [Type];

    /// The values, in order.
    fn values(&self) -> Vec<Value<'_>>;
}

impl Params for () {
    const TYPES: &'static [Type] = &[];

    fn values(&self) -> Vec<Value<'_>> {
        Vec::new()
    }
}

macro_rules! params {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Param),+> Params for ($($name,)+) {
            const TYPES: &'static [Type] = &[$($name::TYPE),+];

            fn values(&self) -> Vec<Value<'_>> {
                vec![$(&self.$index),+]
            }
        }
    };
}

params!(A 0);
params!(A 0, B 1);
params!(A 0, B 1, C 2);
params!(A 0, B 1, C 2, D 3);
params!(A 0, B 1, C 2, D 3, E 4);
params!(A 0, B 1, C 2, D 3, E 4, F 5);
params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
params!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tuples_types_are_its_elements_in_order() {
        type Acquire<'a> = (&'a str, i64, bool, Option<SystemTime>, &'a [String]);
        assert_eq!(
            Acquire::TYPES,
            [
                Type::TEXT,
                Type::INT8,
                Type::BOOL,
                Type::TIMESTAMPTZ,
                Type::TEXT_ARRAY
            ]
        );
        let keys = vec!["a".to_owned()];
        let params: Acquire<'_> = ("k", 5, true, None, &keys);
        assert_eq!(params.values().len(), 5);
        assert!(<()>::TYPES.is_empty());
    }
}
