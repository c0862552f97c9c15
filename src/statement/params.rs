//! The Rust types an operation binds, each with the built-in PostgreSQL type it is sent as, so an
//! operation's parameter types are its parameter struct's field types (or its tuple's) and nothing
//! else.
//!
//! A statement's type names its parameters ([`Statement<P>`](super::Statement)): binding anything
//! else does not compile. An operation with more than three parameters declares a named struct
//! with [`params!`](crate::params), its fields in bind order (`$1` first), beside its statement;
//! one with three or fewer binds a tuple.

use std::time::SystemTime;

use postgres::types::{ToSql, Type};

/// A bind value, typed by its statement.
pub(crate) type Value<'a> = &'a (dyn ToSql + Sync);

/// A Rust value bound as one built-in PostgreSQL type (parameter types stay built-in,
/// so the driver never looks a type up with statements of its own).
pub(crate) trait Param: ToSql + Sync {
    /// The type it is bound as.
    const TYPE: Type;
    /// The same Rust type with its lifetimes `'static`: what a statement's type names, so that one
    /// statement binds values of any lifetime.
    type Static: 'static;
}

/// `@ 'a;` before a type names its lifetimes.
macro_rules! param {
    ($($(@ $($lt:lifetime),+;)? $rust:ty => $sql:ident as $fixed:ty),* $(,)?) => {
        $(impl$(<$($lt),+>)? Param for $rust {
            const TYPE: Type = Type::$sql;
            type Static = $fixed;
        })*
    };
}

param! {
    bool => BOOL as bool,
    i32 => INT4 as i32,
    i64 => INT8 as i64,
    @ 'a; &'a str => TEXT as &'static str,
    String => TEXT as String,
    SystemTime => TIMESTAMPTZ as SystemTime,
    @ 'a, 'b; &'a [&'b str] => TEXT_ARRAY as &'static [&'static str],
    @ 'a; Vec<&'a str> => TEXT_ARRAY as Vec<&'static str>,
    @ 'a, 'b; &'a Vec<&'b str> => TEXT_ARRAY as &'static Vec<&'static str>,
    @ 'a; &'a [String] => TEXT_ARRAY as &'static [String],
    Vec<String> => TEXT_ARRAY as Vec<String>,
    @ 'a; &'a Vec<String> => TEXT_ARRAY as &'static Vec<String>,
    @ 'a; &'a [i32] => INT4_ARRAY as &'static [i32],
    Vec<i32> => INT4_ARRAY as Vec<i32>,
    @ 'a; &'a Vec<i32> => INT4_ARRAY as &'static Vec<i32>,
    @ 'a; &'a [i64] => INT8_ARRAY as &'static [i64],
    Vec<i64> => INT8_ARRAY as Vec<i64>,
    @ 'a; &'a Vec<i64> => INT8_ARRAY as &'static Vec<i64>,
}

/// `NULL` when `None`.
impl<T: Param> Param for Option<T> {
    const TYPE: Type = T::TYPE;
    type Static = Option<T::Static>;
}

/// An operation's parameters `$1 … $n`, in bind order: a tuple of [`Param`]s, or a struct
/// declared with [`params!`](crate::params).
pub(crate) trait Params {
    /// The parameter types, in order.
    const TYPES: &'static [Type];

    /// The same type with its lifetimes `'static`: what a [`Statement`](super::Statement) of these
    /// parameters is declared with, so that it binds them with any lifetime.
    type Static: 'static;

    /// Calls `f` with the values, in order (on the stack: nothing is allocated per call).
    fn with_values<R>(&self, f: impl FnOnce(&[Value<'_>]) -> R) -> R;
}

impl Params for () {
    const TYPES: &'static [Type] = &[];
    type Static = ();

    fn with_values<R>(&self, f: impl FnOnce(&[Value<'_>]) -> R) -> R {
        f(&[])
    }
}

macro_rules! tuple {
    ($($name:ident $index:tt),+) => {
        impl<$($name: Param),+> Params for ($($name,)+) {
            const TYPES: &'static [Type] = &[$($name::TYPE),+];
            type Static = ($($name::Static,)+);

            fn with_values<R>(&self, f: impl FnOnce(&[Value<'_>]) -> R) -> R {
                f(&[$(&self.$index),+])
            }
        }
    };
}

tuple!(A 0);
tuple!(A 0, B 1);
tuple!(A 0, B 1, C 2);
// No wider tuple: more than three parameters are a struct declared with `params!`, its fields
// named.

/// Declares an operation's parameter struct, its fields in bind order (`$1` first), and derives
/// [`Params`] for it: its types are the fields' types, its values the fields in order.
#[macro_export]
#[doc(hidden)]
macro_rules! params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident<'a> {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident: $ty:ty),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name<'a> {
            $($(#[$field_meta])* $field_vis $field: $ty),+
        }

        impl<'a> $crate::statement::Params for $name<'a> {
            const TYPES: &'static [::postgres::types::Type] =
                &[$(<$ty as $crate::statement::Param>::TYPE),+];
            type Static = $name<'static>;

            fn with_values<R>(
                &self,
                f: impl FnOnce(&[$crate::statement::Value<'_>]) -> R,
            ) -> R {
                f(&[$(&self.$field),+])
            }
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident: $ty:ty),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),+
        }

        impl $crate::statement::Params for $name {
            const TYPES: &'static [::postgres::types::Type] =
                &[$(<$ty as $crate::statement::Param>::TYPE),+];
            type Static = $name;

            fn with_values<R>(
                &self,
                f: impl FnOnce(&[$crate::statement::Value<'_>]) -> R,
            ) -> R {
                f(&[$(&self.$field),+])
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::params! {
        /// A test's parameters.
        struct Acquire<'a> {
            key: &'a str,
            ttl_us: i64,
            keep: bool,
            at: Option<SystemTime>,
            keys: &'a [String],
        }
    }

    #[test]
    fn a_structs_types_are_its_fields_in_order() {
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
        let params = Acquire {
            key: "k",
            ttl_us: 5,
            keep: true,
            at: None,
            keys: &keys,
        };
        assert_eq!(params.with_values(|values| values.len()), 5);
        assert_eq!(<(&str, i64)>::TYPES, [Type::TEXT, Type::INT8]);
        assert!(<()>::TYPES.is_empty());
    }
}
