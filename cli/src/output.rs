//! How listings are shown: aligned tables for people, JSON for scripts, UTC timestamps for both.

use std::fmt::Write as _;
use std::time::SystemTime;

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
    pgtenure::Timestamp(t).to_string()
}

/// An optional timestamp; `-` when absent.
pub fn opt_time(t: Option<SystemTime>) -> String {
    t.map_or_else(|| "-".to_owned(), time)
}

/// An optional timestamp as JSON: a string, or null.
pub fn json_time(t: Option<SystemTime>) -> serde_json::Value {
    t.map_or(serde_json::Value::Null, |t| time(t).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn timestamps_are_utc_to_the_millisecond() {
        let t = UNIX_EPOCH + std::time::Duration::from_millis(1_764_625_427_123);
        assert_eq!(time(t), "2025-12-01T21:43:47.123Z");
        assert_eq!(opt_time(None), "-");
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
