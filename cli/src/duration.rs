//! Durations on the command line: `30s`, `500ms`, `2m`, `1h`, `1.5s`, `1m30s`; at most 100 years,
//! the library's longest duration ([`pgtenure::MAX_DURATION`]).

use std::time::Duration;

/// A duration of 100 ms or more (`what` names it in the error): `--interval`, `--scrape-timeout`.
pub(crate) fn at_least_100ms(what: &str, text: &str) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration < Duration::from_millis(100) {
        return Err(format!("{text:?}: {what} is 100ms or more"));
    }
    Ok(duration)
}

/// Parses a duration: one or more numbers, each followed by a unit (`ms`, `s`, `m`, `h`), such as
/// `30s`, `500ms`, `2m`, `1.5s` or `1m30s`. `0` alone is zero. Over 100 years is refused: no
/// duration means more, and adding one to an `Instant` cannot overflow.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("the duration is empty; write e.g. 30s, 500ms or 2m".into());
    }
    if text.starts_with('-') {
        return Err(format!(
            "{text:?} is negative; a duration is 0 or more, e.g. 30s, 500ms or 2m"
        ));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let units = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(units);
        if number.is_empty() {
            return Err(format!(
                "{text:?} is not a duration: a number must come before {unit:?}"
            ));
        }
        let seconds_per_unit = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "{text:?} has no unit after {number}; write e.g. {number}s or {number}ms"
                ))
            }
            other => {
                return Err(format!(
                    "{text:?} has the unknown unit {other:?}; use ms, s, m or h"
                ))
            }
        };
        let value: f64 = number
            .parse()
            .map_err(|_| format!("{number:?} in {text:?} is not a number"))?;
        let part = Duration::try_from_secs_f64(value * seconds_per_unit)
            .map_err(|_| format!("{text:?} is too long"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("{text:?} is too long"))?;
        rest = tail;
    }
    if total > pgtenure::MAX_DURATION {
        return Err(format!(
            "{text:?} is too long: at most 100 years ({}h) is accepted",
            pgtenure::MAX_DURATION.as_secs() / 3600
        ));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_sums() {
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse(" 250ms "), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("30").unwrap_err().contains("no unit"));
        assert!(parse("-5s").unwrap_err().contains("negative"));
        assert!(parse("3d").unwrap_err().contains("unknown unit"));
        assert!(parse("s")
            .unwrap_err()
            .contains("a number must come before"));
        assert!(parse("1..2s").unwrap_err().contains("not a number"));
        assert!(parse("-1s").is_err());
        assert!(parse("99999999999999999999h")
            .unwrap_err()
            .contains("too long"));
        assert!(parse("4000000000000000h")
            .unwrap_err()
            .contains("at most 100 years"));
        assert_eq!(parse("876600h"), Ok(pgtenure::MAX_DURATION));
        assert!(parse("876600h1ms").is_err());
    }
}
