//! One writer for tables of results: a header and rows of cells, printed
//! as a markdown table or as CSV. The tools (`emb-replay`, `emb-locality`:
//! markdown by default, CSV with `--csv`) and the peer harness
//! (`embtier-peers`) print every table through it.
//!
//! ```
//! use embtier_sim::table::Table;
//!
//! let mut t = Table::new(["engine", "rows/s"]).right_aligned([1]);
//! t.row(["embtier", "273.9 k"]);
//! assert_eq!(
//!     t.markdown(),
//!     "| engine | rows/s |\n|---|---:|\n| embtier | 273.9 k |\n"
//! );
//! assert_eq!(t.csv(), "engine,rows/s\nembtier,273.9 k\n");
//! ```

use std::fmt::Write as _;

/// A table of text cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    /// Per column: right-aligned in markdown (`---:`).
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        let header: Vec<String> = header.into_iter().map(Into::into).collect();
        Table {
            right: vec![false; header.len()],
            header,
            rows: Vec::new(),
        }
    }

    /// Right-align these columns (0-based) in markdown, as numbers are;
    /// every column is left-aligned otherwise. An index past the last
    /// column is ignored. CSV has no alignment.
    pub fn right_aligned(mut self, cols: impl IntoIterator<Item = usize>) -> Table {
        for c in cols {
            if let Some(r) = self.right.get_mut(c) {
                *r = true;
            }
        }
        self
    }

    /// Rows so far.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row has been added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Append a row (as many cells as columns).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let r: Vec<String> = cells.into_iter().map(Into::into).collect();
        debug_assert_eq!(r.len(), self.header.len(), "{:?}", self.header);
        self.rows.push(r);
    }

    /// As markdown.
    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let line = |o: &mut String, cells: &[String]| {
            o.push('|');
            for c in cells {
                let _ = write!(o, " {} |", c.replace('|', "\\|"));
            }
            o.push('\n');
        };
        line(&mut o, &self.header);
        o.push('|');
        for &right in &self.right {
            o.push_str(if right { "---:|" } else { "---|" });
        }
        o.push('\n');
        for r in &self.rows {
            line(&mut o, r);
        }
        o
    }

    /// As CSV: the header, then the rows; a cell holding a comma, a quote
    /// or a line break is quoted.
    pub fn csv(&self) -> String {
        let mut o = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let cells: Vec<String> = r.iter().map(|c| csv_cell(c)).collect();
            o.push_str(&cells.join(","));
            o.push('\n');
        }
        o
    }

    /// [`Table::csv`] when `csv`, else [`Table::markdown`].
    pub fn render(&self, csv: bool) -> String {
        if csv {
            self.csv()
        } else {
            self.markdown()
        }
    }
}

/// `c` as a CSV cell: quoted (its quotes doubled) when it holds a comma,
/// a quote or a line break.
pub fn csv_cell(c: &str) -> String {
    if c.contains([',', '"', '\n']) {
        format!("\"{}\"", c.replace('"', "\"\""))
    } else {
        c.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_csv() {
        let mut t = Table::new(["a", "b"]);
        t.row(["1", "x,y"]);
        t.row(["2", "p|q"]);
        assert_eq!(
            t.markdown(),
            "| a | b |\n|---|---|\n| 1 | x,y |\n| 2 | p\\|q |\n"
        );
        assert_eq!(t.csv(), "a,b\n1,\"x,y\"\n2,p|q\n");
        let t = Table::new(["a", "b", "c"]).right_aligned([1, 2, 7]);
        assert_eq!(t.markdown(), "| a | b | c |\n|---|---:|---:|\n");
        assert!(t.is_empty());
    }
}
