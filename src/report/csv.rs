//! CSV tables: the numbers behind a figure.

use std::path::Path;

use super::{ReportError, write_atomic};

/// Writes a CSV table: `header`, then `rows`, each with as many fields as the header. Fields
/// holding commas, quotes or line breaks are quoted.
pub fn write_csv(
    path: impl AsRef<Path>,
    header: &[&str],
    rows: &[Vec<String>],
) -> Result<(), ReportError> {
    let path = path.as_ref();
    if let Some(i) = rows.iter().position(|r| r.len() != header.len()) {
        let problem = format!("row {i} has {} fields, the header {}", rows[i].len(), header.len());
        return Err(ReportError::Input { path: path.to_path_buf(), problem });
    }
    let field = |f: &str| match f.contains([',', '"', '\n', '\r']) {
        true => format!("\"{}\"", f.replace('"', "\"\"")),
        false => f.to_string(),
    };
    let line = |fields: Vec<String>| fields.join(",") + "\n";
    let mut text = line(header.iter().map(|h| field(h)).collect());
    for row in rows {
        text.push_str(&line(row.iter().map(|f| field(f)).collect()));
    }
    write_atomic(path, text.as_bytes())
}
