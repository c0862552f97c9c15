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

/// `t` against the database's `now`: `in 4s` ahead, `2m ago` behind (`now` at the second).
pub fn relative(t: SystemTime, now: SystemTime) -> String {
    match t.duration_since(now) {
        Ok(ahead) => format!("in {}", short(ahead)),
        Err(behind) => format!("{} ago", short(behind.duration())),
    }
}

/// How long since `t` by the database's `now`, kubectl's AGE: `45s`, `3m`, `5h`, `2d`.
pub fn age(t: SystemTime, now: SystemTime) -> String {
    short(now.duration_since(t).unwrap_or_default())
}

/// A duration in one unit: seconds under 2 minutes, minutes under 2 hours, hours under 2 days,
/// then days.
fn short(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7_199 => format!("{}m", secs / 60),
        7_200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
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
    fn relative_times_read_as_kubectl_writes_them() {
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let at = |delta: i64| {
            if delta >= 0 {
                now + std::time::Duration::from_secs(delta as u64)
            } else {
                now - std::time::Duration::from_secs((-delta) as u64)
            }
        };
        assert_eq!(relative(at(4), now), "in 4s");
        assert_eq!(relative(at(-150), now), "2m ago");
        assert_eq!(relative(at(7_300), now), "in 2h");
        assert_eq!(age(at(-3 * 86_400), now), "3d");
        assert_eq!(
            age(at(5), now),
            "0s",
            "a clock ahead of the database is not negative"
        );
    }

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
