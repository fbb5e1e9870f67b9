//! Reports of results: figures, tables and the loss curve of a run.
//!
//! - [`plot`]: SVG figures (heat maps, line plots) drawn with plotters;
//! - [`png`]: heat maps as PNG images (attention maps);
//! - [`csv`]: the numbers behind a figure, as CSV;
//! - [`table`]: a [`Table`] printed as Markdown and written as CSV;
//! - [`curve`]: the loss curve of a training run, from the Learner's metric logs.
//!
//! Every file is written to a temporary sibling and renamed into place, so a reader never sees
//! half a file and an interrupted run leaves the previous file intact.

pub mod csv;
pub mod curve;
pub mod plot;
pub mod png;
pub mod table;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub use table::Table;

/// Why a figure or table was not written; every variant names the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportError {
    /// The data cannot be drawn (mismatched sizes, nothing to plot).
    Input { path: PathBuf, problem: String },
    /// plotters failed while drawing.
    Draw { path: PathBuf, problem: String },
    /// The file could not be written.
    Write { path: PathBuf, problem: String },
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportError::Input { path, problem } => {
                write!(f, "cannot plot {}: {problem}", path.display())
            }
            ReportError::Draw { path, problem } => {
                write!(f, "drawing {} failed: {problem}", path.display())
            }
            ReportError::Write { path, problem } => {
                write!(f, "cannot write {}: {problem}", path.display())
            }
        }
    }
}

impl std::error::Error for ReportError {}

/// Writes `bytes` to a temporary file beside `path`, then renames it to `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let error =
        |e: std::io::Error| ReportError::Write { path: path.to_path_buf(), problem: e.to_string() };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let unique = (std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    let tmp = path.with_file_name(format!(".{name}.tmp-{}-{}", unique.0, unique.1));
    std::fs::write(&tmp, bytes).map_err(error)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        error(e)
    })
}
