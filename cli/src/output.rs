//! How listings are shown: aligned tables for people, JSON for scripts, UTC timestamps for both.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// A table of text cells with a header row, printed with its columns aligned.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row; `(none)` when it has no rows.
    pub fn render(&self) -> String {
        if self.rows.is_empty() {
            return "(none)\n".to_owned();
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let headers: Vec<String> = self.headers.iter().map(|h| (*h).to_owned()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:width$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `yes` or `no`.
pub fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

/// A database timestamp in UTC, to the millisecond: `2026-12-01T21:53:47.123Z`.
pub fn time(t: SystemTime) -> String {
    let (secs, millis) = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_millis()),
        Err(e) => {
            let d = e.duration();
            let whole = d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0);
            let millis = (1000 - d.subsec_millis()) % 1000;
            (-whole, millis)
        }
    };
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// An optional timestamp; `-` when absent.
pub fn opt_time(t: Option<SystemTime>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// An optional timestamp as JSON: a string, or null.
pub fn json_time(t: Option<SystemTime>) -> serde_json::Value {
    t.map_or(serde_json::Value::Null, |t| time(t).into())
}

/// The proleptic Gregorian date of a day counted from 1970-01-01, by eras of 400 years (146,097
/// days) starting on March 1st, so that the leap day ends each era's year.
fn civil(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_utc_to_the_millisecond() {
        let at = |secs: u64, millis: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + millis);
        assert_eq!(time(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(time(at(1_764_625_427, 123)), "2025-12-01T21:43:47.123Z");
        assert_eq!(time(at(4_107_542_399, 999)), "2100-02-28T23:59:59.999Z");
        assert_eq!(time(at(253_402_300_799, 0)), "9999-12-31T23:59:59.000Z");
        assert_eq!(
            time(UNIX_EPOCH - Duration::from_millis(1)),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn tables_align_their_columns() {
        let mut t = Table::new(&["KEY", "OWNER"]);
        assert_eq!(t.render(), "(none)\n");
        t.row(vec!["a-long-key".into(), "x".into()]);
        t.row(vec!["k".into(), "owner-2".into()]);
        assert_eq!(
            t.render(),
            "KEY         OWNER\na-long-key  x\nk           owner-2\n"
        );
    }
}
