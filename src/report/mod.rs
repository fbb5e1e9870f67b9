//! Reports of results: figures, tables and the loss curve of a run.
//!
//! - [`plot`]: SVG figures (heat maps, line plots) drawn with plotters;
//! - [`attention_map`]: attention maps as figures (axes, tokens, colour bar, the window's
//!   edge), in PNG (drawn with a bitmap font of the crate's own) or SVG;
//! - [`csv`]: the numbers behind a figure, as CSV;
//! - [`table`]: a [`Table`] printed as Markdown and written as CSV;
//! - [`curve`]: the loss curve of a training run, from the Learner's metric logs.
//!
//! Every file is written to a temporary sibling and renamed into place, so a reader never sees
//! half a file and an interrupted run leaves the previous file intact.

pub mod attention_map;
pub mod csv;
pub mod curve;
mod font;
pub mod plot;
mod png;
pub mod table;

use std::fmt;
use std::path::{Path, PathBuf};

use swa_models::files::WriteError;

pub use table::Table;

/// Why a figure or table was not written; every variant names the file.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReportError {
    /// The data cannot be drawn (mismatched sizes, nothing to plot).
    Input { path: PathBuf, problem: String },
    /// plotters failed while drawing.
    Draw { path: PathBuf, problem: String },
    /// The file could not be written: the file and the operating system's reason.
    Write(WriteError),
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
            ReportError::Write(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for ReportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReportError::Write(error) => Some(error),
            _ => None,
        }
    }
}

/// Writes `bytes` to `path` atomically (`swa_models::files`): a temporary file beside it,
/// flushed, then renamed over it.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    swa_models::files::write_bytes_atomically(path, bytes).map_err(ReportError::Write)
}
