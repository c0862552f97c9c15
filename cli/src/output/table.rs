//! The aligned table every listing prints without `--json`.

use std::fmt::Write as _;

/// A table of text cells with a header row, printed with its columns aligned.
#[derive(Debug)]
pub(super) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(super) fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row; `(none)` when it has no rows.
    pub(super) fn render(&self) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
