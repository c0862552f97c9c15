//! Values written as SQL literals from their binary wire encoding, for `EXECUTE`: the driver's own
//! `ToSql` produces the bytes, and each supported type's bytes are written as a quoted literal that
//! the prepared statement's parameter type reads with its input function (text escaped by the
//! driver's `escape_literal`).

use postgres::types::Type;

/// Whether values of `ty` can be written as literals.
pub(super) fn renderable(ty: &Type) -> bool {
    [
        Type::BOOL,
        Type::INT4,
        Type::INT8,
        Type::TEXT,
        Type::TIMESTAMPTZ,
        Type::INT4_ARRAY,
        Type::INT8_ARRAY,
        Type::TEXT_ARRAY,
    ]
    .contains(ty)
}

/// A value in its binary wire encoding, as a quoted SQL literal of `ty` (which the prepared
/// statement's parameter type reads with its input function).
pub(super) fn literal(ty: &Type, bytes: &[u8]) -> Option<String> {
    let text = match *ty {
        Type::INT8_ARRAY | Type::INT4_ARRAY | Type::TEXT_ARRAY => array_text(ty, bytes)?,
        _ => scalar_text(ty, bytes)?,
    };
    Some(postgres_protocol::escape::escape_literal(&text))
}

/// A scalar's text form, as its type's input function reads it.
fn scalar_text(ty: &Type, bytes: &[u8]) -> Option<String> {
    match *ty {
        Type::BOOL => match bytes {
            [0] => Some("false".into()),
            [_] => Some("true".into()),
            _ => None,
        },
        Type::INT4 => Some(i32::from_be_bytes(bytes.try_into().ok()?).to_string()),
        Type::INT8 => Some(i64::from_be_bytes(bytes.try_into().ok()?).to_string()),
        Type::TEXT => {
            let text = std::str::from_utf8(bytes).ok()?;
            // A NUL cannot travel inside a query string.
            (!text.contains('\0')).then(|| text.to_owned())
        }
        Type::TIMESTAMPTZ => timestamp_text(i64::from_be_bytes(bytes.try_into().ok()?)),
        _ => None,
    }
}

/// A one-dimensional array's text form (`{"a","b",NULL}`) from its binary encoding.
fn array_text(ty: &Type, bytes: &[u8]) -> Option<String> {
    let element = match *ty {
        Type::INT8_ARRAY => Type::INT8,
        Type::INT4_ARRAY => Type::INT4,
        Type::TEXT_ARRAY => Type::TEXT,
        _ => return None,
    };
    let mut rest = bytes;
    let int = |rest: &mut &[u8]| -> Option<i32> {
        let (head, tail) = rest.split_first_chunk::<4>()?;
        *rest = tail;
        Some(i32::from_be_bytes(*head))
    };
    let dimensions = int(&mut rest)?;
    let _has_nulls = int(&mut rest)?;
    let _element_oid = int(&mut rest)?;
    let count = match dimensions {
        0 => 0,
        1 => {
            let count = int(&mut rest)?;
            let _lower_bound = int(&mut rest)?;
            usize::try_from(count).ok()?
        }
        _ => return None,
    };
    let mut text = String::with_capacity(2 + rest.len() + 4 * count);
    text.push('{');
    for i in 0..count {
        if i > 0 {
            text.push(',');
        }
        let len = int(&mut rest)?;
        if len < 0 {
            text.push_str("NULL");
            continue;
        }
        let len = usize::try_from(len).ok()?;
        let (value, tail) = (rest.get(..len)?, &rest[len..]);
        rest = tail;
        let value = scalar_text(&element, value)?;
        text.push('"');
        for c in value.chars() {
            if c == '"' || c == '\\' {
                text.push('\\');
            }
            text.push(c);
        }
        text.push('"');
    }
    text.push('}');
    rest.is_empty().then_some(text)
}

/// Microseconds since 2000-01-01 00:00 UTC as `YYYY-MM-DD HH:MM:SS.ffffff+00` (`infinity` at the
/// ends), for years 1 to 9999; `None` beyond.
fn timestamp_text(micros: i64) -> Option<String> {
    match micros {
        i64::MAX => return Some("infinity".into()),
        i64::MIN => return Some("-infinity".into()),
        _ => {}
    }
    const DAY_US: i64 = 86_400_000_000;
    // 2000-01-01 is day 10,957 of the Unix epoch.
    let days = micros.div_euclid(DAY_US) + 10_957;
    let of_day = micros.rem_euclid(DAY_US);
    let (year, month, day) = civil_from_days(days);
    if !(1..=9999).contains(&year) {
        return None;
    }
    let (secs, frac) = (of_day / 1_000_000, of_day % 1_000_000);
    Some(format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{frac:06}+00",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    ))
}

/// The proleptic Gregorian date of a day number counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use postgres::types::{IsNull, ToSql};
    use std::time::{Duration, SystemTime};

    fn render(ty: Type, value: &(dyn ToSql + Sync)) -> Option<String> {
        let mut buf = BytesMut::new();
        match value.to_sql_checked(&ty, &mut buf).ok()? {
            IsNull::Yes => Some("NULL".into()),
            IsNull::No => literal(&ty, &buf),
        }
    }

    #[test]
    fn scalars_are_written_as_quoted_literals() {
        assert_eq!(render(Type::INT8, &-42_i64).unwrap(), "'-42'");
        assert_eq!(
            render(Type::INT8, &i64::MIN).unwrap(),
            "'-9223372036854775808'"
        );
        assert_eq!(render(Type::INT4, &7_i32).unwrap(), "'7'");
        assert_eq!(render(Type::BOOL, &true).unwrap(), "'true'");
        assert_eq!(render(Type::BOOL, &false).unwrap(), "'false'");
        assert_eq!(render(Type::TEXT, &"it's").unwrap(), "'it''s'");
        assert_eq!(render(Type::TEXT, &"a\\b").unwrap(), " E'a\\\\b'");
        assert_eq!(render(Type::INT8, &None::<i64>).unwrap(), "NULL");
        assert_eq!(render(Type::TEXT, &"nul\0byte"), None, "sent unprepared");
    }

    #[test]
    fn timestamps_are_utc_with_microseconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_589_482_123_456);
        assert_eq!(
            render(Type::TIMESTAMPTZ, &t).unwrap(),
            "'2025-12-01 11:44:42.123456+00'"
        );
        let epoch = SystemTime::UNIX_EPOCH;
        assert_eq!(
            render(Type::TIMESTAMPTZ, &epoch).unwrap(),
            "'1970-01-01 00:00:00.000000+00'"
        );
        let before = SystemTime::UNIX_EPOCH - Duration::from_micros(1);
        assert_eq!(
            render(Type::TIMESTAMPTZ, &before).unwrap(),
            "'1969-12-31 23:59:59.999999+00'"
        );
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(
            render(Type::TIMESTAMPTZ, &leap).unwrap(),
            "'2000-02-29 00:00:00.000000+00'"
        );
        assert_eq!(timestamp_text(i64::MAX).unwrap(), "infinity");
        // Year 10000 and beyond: sent unprepared.
        assert_eq!(timestamp_text(252_455_616_000_000_000), None);
    }

    #[test]
    fn arrays_are_written_as_array_literals() {
        let keys = vec!["a".to_owned(), "b\"c".to_owned(), "d\\e,{}".to_owned()];
        assert_eq!(
            render(Type::TEXT_ARRAY, &keys).unwrap(),
            r#" E'{"a","b\\"c","d\\\\e,{}"}'"#
        );
        assert_eq!(
            render(Type::INT4_ARRAY, &vec![1_i32, -2]).unwrap(),
            r#"'{"1","-2"}'"#
        );
        assert_eq!(
            render(Type::INT8_ARRAY, &Vec::<i64>::new()).unwrap(),
            "'{}'"
        );
        let with_null = vec![Some("x"), None];
        assert_eq!(
            render(Type::TEXT_ARRAY, &with_null).unwrap(),
            r#"'{"x",NULL}'"#
        );
    }

    #[test]
    fn civil_dates_match_the_calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
    }
}
