//! The run's metric logs, in the files burn-train's own file logger writes
//! (`DIR/train/epoch-3/Loss.log`, one serialized entry per line), which the summary and
//! resume (`resume_logs.rs`) read. Burn's logger panics on a failed write (`expect`), and its
//! asynchronous writer then panics again while dropping, which aborts the process; this one
//! writes each line itself and reports a failure to the run's [`RunStop`] instead.
//!
//! A resumed run appends to the logs its checkpoint left (cut back to it before training,
//! `resume_logs.rs`), under the epoch numbers of the whole run: burn-train's event store numbers
//! the first epoch of every run 1 (later ones by the Learner's count), so epoch 1 is read as
//! the epoch the run starts in.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::train::logger::MetricLogger;
use burn::train::metric::store::{EpochSummary, MetricsUpdate, Split};
use burn::train::metric::{MetricDefinition, MetricId, NumericEntry};
use swa_models::files::WriteError;

use crate::stop::RunStop;

/// A metric logger writing Burn's log files under a run's folder, stopping the run on the
/// first line it cannot write.
pub struct RunMetricLogger {
    directory: PathBuf,
    definitions: HashMap<MetricId, MetricDefinition>,
    /// The open file of each metric and split in the current epoch.
    files: HashMap<(String, String), File>,
    epoch: Option<usize>,
    /// The epoch the run starts in: 1, or the one its checkpoint lies in.
    first_epoch: usize,
    stop: RunStop,
}

impl RunMetricLogger {
    /// A logger writing under `directory` (the run's folder or a rank's) for a run starting in
    /// epoch `first_epoch` (from 1), reporting failures to `stop`.
    pub fn new(directory: &Path, first_epoch: usize, stop: RunStop) -> Self {
        Self {
            directory: directory.to_path_buf(),
            definitions: HashMap::new(),
            files: HashMap::new(),
            epoch: None,
            first_epoch,
            stop,
        }
    }

    /// The log file of metric `name` in `split` at `epoch`, where Burn's logger puts it.
    fn path(&self, name: &str, epoch: usize, split: &Split) -> PathBuf {
        let split_dir = match split {
            Split::Test(Some(tag)) => {
                self.directory.join("test").join(tag.trim().replace(' ', "-").to_lowercase())
            }
            other => self.directory.join(other.to_string()),
        };
        split_dir.join(format!("epoch-{epoch}")).join(format!("{}.log", name.replace(' ', "_")))
    }

    /// Appends `line` to metric `name`'s log (created at its first line).
    fn append(&mut self, name: &str, line: &str, epoch: usize, split: &Split) {
        let key = (name.to_string(), split.to_string());
        let path = self.path(name, epoch, split);
        let written = match self.files.get_mut(&key) {
            Some(file) => writeln!(file, "{line}"),
            None => create(&path).and_then(|mut file| {
                writeln!(file, "{line}")?;
                self.files.insert(key, file);
                Ok(())
            }),
        };
        if let Err(source) = written {
            self.stop.write_failed(WriteError { path, source });
        }
    }
}

/// Opens the log file at `path` for appending, creating it and its folders.
fn create(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().append(true).create(true).open(path)
}

impl MetricLogger for RunMetricLogger {
    fn log(&mut self, update: MetricsUpdate, epoch: usize, split: &Split) {
        let epoch = if epoch == 1 { self.first_epoch } else { epoch };
        if self.epoch != Some(epoch) {
            self.files.clear();
            self.epoch = Some(epoch);
        }
        if self.stop.has_failed() {
            return;
        }
        let numeric = update.entries_numeric.iter().map(|numeric| &numeric.entry);
        for entry in update.entries.iter().chain(numeric) {
            let Some(name) = self.definitions.get(&entry.metric_id).map(|d| d.name.clone()) else {
                continue;
            };
            self.append(&name, &entry.serialized_entry.serialized, epoch, split);
        }
    }

    fn read_numeric(
        &mut self,
        name: &str,
        epoch: usize,
        split: &Split,
    ) -> Result<Vec<NumericEntry>, String> {
        let text = std::fs::read_to_string(self.path(name, epoch, split)).unwrap_or_default();
        text.lines().filter(|line| !line.is_empty()).map(NumericEntry::deserialize).collect()
    }

    fn log_metric_definition(&mut self, definition: MetricDefinition) {
        self.definitions.insert(definition.metric_id.clone(), definition);
    }

    fn log_epoch_summary(&mut self, _summary: EpochSummary) {
        self.files.clear();
    }
}
