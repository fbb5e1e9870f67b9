//! Tables of results: printed as Markdown, written as CSV.

use std::path::Path;

use super::ReportError;
use super::csv::write_csv;

/// A table of results: printed as Markdown, written as CSV.
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// Column names.
    pub header: Vec<String>,
    /// One entry per column in each row.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with columns `header` and no rows.
    pub fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// The table in Markdown.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut text = line(&self.header);
        text.push_str(&line(&vec!["---".to_string(); self.header.len()]));
        for row in &self.rows {
            text.push_str(&line(row));
        }
        text
    }

    /// Writes the table as CSV.
    pub fn write_csv(&self, path: &Path) -> Result<(), ReportError> {
        let header: Vec<&str> = self.header.iter().map(String::as_str).collect();
        write_csv(path, &header, &self.rows)
    }
}
