//! The one error type of swa-training: every variant names what failed and where (the field,
//! the file, the checkpoint, the layer), so that a run stops with one line saying why.

use std::fmt;
use std::path::PathBuf;

use burn::tensor::DataError;
use swa_attention::AttentionError;
use swa_models::ModelError;
use swa_models::files::WriteError;
use swa_models::layers::AttentionKind;

use crate::distributed::ClusterProblem;

/// Why training, evaluation or a data source failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TrainingError {
    /// A field of a run's or a synthetic task's configuration has a value that cannot work.
    Field {
        /// The field, as `Config.field` (`TrainConfig.seq_len`, `Mqar.queries`, …).
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// The model's configuration, or building, running or saving the model, failed.
    Model(ModelError),
    /// A corpus file could not be read: missing, unreadable, or not UTF-8 text for a word corpus.
    CorpusUnreadable {
        /// The file.
        path: PathBuf,
        /// The I/O or encoding error.
        problem: String,
    },
    /// A corpus file is too small for the split it needs.
    CorpusTooSmall {
        /// The file.
        path: PathBuf,
        /// Its size and what the split needs.
        problem: String,
    },
    /// A token stream too short for one batch of windows of the loader.
    TooFewTokens {
        /// Tokens in the stream.
        tokens: usize,
        /// Tokens of the text per window: the sequence length + 1, or the sequence length
        /// after a BOS.
        window: usize,
        /// Windows per batch.
        batch: usize,
    },
    /// A loader of a synthetic task asked for batches of no examples.
    EmptyBatch,
    /// A loader of streams (segment memory) asked to start its windows with a BOS: segments
    /// continue one another, so only a stream's first could.
    BosInStreams,
    /// A loader could not be built for `purpose`.
    Loader {
        /// What the loader was for: `train split`, `evaluation at length 512`, …
        purpose: String,
        /// Why it could not be built.
        source: Box<TrainingError>,
    },
    /// A JSON configuration file could not be read.
    ConfigUnreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A JSON configuration file does not hold the configuration.
    ConfigInvalid {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A JSON configuration file names a field the configuration does not have (a misspelt
    /// field would otherwise keep its default silently).
    ConfigUnknownField {
        /// The file.
        path: PathBuf,
        /// The field, as a dotted path.
        field: String,
    },
    /// A file of the run could not be written (the disk is full, the folder is read-only or
    /// gone): the run stopped there, its last complete checkpoint intact.
    Write(WriteError),
    /// A value was not finite (a step's loss, before its update; the validation loss or a
    /// weight, before a checkpoint; here, or under MPI in any process): the run stopped there
    /// and wrote nothing after it; `--resume` continues from its last checkpoint.
    Diverged {
        /// Where: the step, and what was not finite.
        at: crate::stop::Divergence,
        /// The run's checkpoint folder.
        dir: PathBuf,
        /// The last complete checkpoint; `None` before the first.
        checkpoint: Option<usize>,
    },
    /// The run was asked to stop (a signal, the dashboard's quit) and stopped at the next
    /// optimizer step, without saving `model.mpk`; `--resume` continues from its last
    /// checkpoint.
    Stopped {
        /// What asked: `SIGTERM`, `SIGINT`, the dashboard's quit, or (under MPI) another
        /// process's stop request.
        reason: &'static str,
        /// The run's checkpoint folder.
        dir: PathBuf,
        /// The last complete checkpoint, where `--resume` continues; `None` before the first.
        checkpoint: Option<usize>,
        /// Whether that checkpoint is of the step training stopped at (the run's own loop);
        /// otherwise (burn-train's loop for several devices) the steps after it are trained
        /// again.
        at_stop: bool,
    },
    /// A fresh run into a folder that already holds one.
    RunExists {
        /// The run's folder.
        out: PathBuf,
    },
    /// Another process is training the run in this folder: it holds the folder's lock
    /// ([`crate::run_lock`]).
    RunLocked {
        /// The run's folder.
        out: PathBuf,
        /// The holder, as its lock file names it: process id, host and start time.
        holder: String,
    },
    /// A resume whose checkpoints are all incomplete or damaged.
    NoUsableCheckpoint {
        /// The checkpoint folder.
        dir: PathBuf,
        /// What is wrong with each checkpoint, newest first.
        problems: Vec<String>,
    },
    /// The checkpoint a resume starts from cannot be read: truncated, corrupt or missing.
    CheckpointUnreadable {
        /// The checkpoint file.
        path: PathBuf,
        /// What the reader found.
        problem: String,
    },
    /// The checkpoint a resume starts from holds the weights of another configuration.
    CheckpointMismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// The weight that is missing, unexpected or of another shape.
        problem: String,
    },
    /// An evaluation window asked of a layer whose kind has no window to replace.
    EvalWindow {
        /// The layer.
        layer: usize,
        /// Its attention kind.
        kind: AttentionKind,
    },
    /// A position past the end of the sequence.
    Position {
        /// The position.
        position: usize,
        /// Tokens in the sequence.
        len: usize,
    },
    /// Tensor values could not be read back from the device.
    Data(DataError),
    /// An attention call outside a model (LongNet's sequence parallelism) refused its input.
    Attention(AttentionError),
    /// A process of a multi-process run could not take its place in it.
    Cluster {
        /// The process's rank.
        rank: usize,
        /// What went wrong.
        problem: ClusterProblem,
    },
    /// A folder is not a training run: its `train.json` cannot be read.
    NotARun {
        /// The folder.
        run: PathBuf,
        /// Why `train.json` could not be read.
        source: Box<TrainingError>,
    },
    /// The trained model of a run cannot be loaded (its `model.mpk` is missing, truncated,
    /// corrupt or of another configuration).
    RunModel {
        /// The run's folder.
        run: PathBuf,
        /// What the loader found (boxed: it is the largest variant's payload).
        source: Box<ModelError>,
    },
}

impl TrainingError {
    /// [`TrainingError::Field`]: `field` (as `Config.field`) has a value that cannot work.
    pub fn field(field: &'static str, problem: impl Into<String>) -> Self {
        TrainingError::Field { field, problem: problem.into() }
    }

    /// This error as the reason a loader for `purpose` (`train split`, `evaluation at length
    /// 512`) could not be built.
    pub fn in_loader(self, purpose: impl Into<String>) -> Self {
        TrainingError::Loader { purpose: purpose.into(), source: Box::new(self) }
    }
}

impl fmt::Display for TrainingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TrainingError::*;
        match self {
            Field { field, problem } => write!(f, "{field}: {problem}"),
            Model(source) => write!(f, "{source}"),
            CorpusUnreadable { path, problem } => {
                write!(f, "cannot read corpus {}: {problem}", path.display())
            }
            CorpusTooSmall { path, problem } => {
                write!(f, "corpus {} is too small: {problem}", path.display())
            }
            TooFewTokens { tokens, window, batch } => write!(
                f,
                "a split of {tokens} tokens cannot give windows of {window} tokens of text \
                 in batches of {batch}"
            ),
            EmptyBatch => write!(f, "a task loader needs a batch of at least 1"),
            BosInStreams => write!(
                f,
                "segment memory reads the text as continuing streams, which cannot start every \
                 segment with the checkpoint's BOS token"
            ),
            Loader { purpose, source } => write!(f, "{purpose}: {source}"),
            ConfigUnreadable { path, source } => {
                write!(f, "{}: cannot read: {source}", path.display())
            }
            ConfigInvalid { path, source } => {
                write!(f, "{}: not a valid configuration: {source}", path.display())
            }
            ConfigUnknownField { path, field } => {
                write!(f, "{}: unknown field `{field}`", path.display())
            }
            Write(error) => error.fmt(f),
            Stopped { reason, dir, checkpoint: Some(checkpoint), at_stop } => write!(
                f,
                "training stopped by {reason}; --resume continues from checkpoint {checkpoint} in {}{}",
                dir.display(),
                if *at_stop { "" } else { " (the steps after it are trained again)" }
            ),
            Diverged { at, dir, checkpoint } => {
                write!(f, "training diverged at step {}: {} is {}", at.step, at.what, at.value)?;
                if at.value.is_finite() {
                    write!(f, " here and not finite in another process")?;
                }
                match checkpoint {
                    Some(checkpoint) => write!(
                        f,
                        "; nothing was saved after it, and --resume continues from checkpoint \
                         {checkpoint} in {}",
                        dir.display()
                    ),
                    None => write!(f, "; no checkpoint was saved before it"),
                }
            }
            Stopped { reason, dir, checkpoint: None, .. } => write!(
                f,
                "training stopped by {reason} before its first checkpoint (none in {}); --resume starts it afresh",
                dir.display()
            ),
            RunExists { out } => write!(
                f,
                "{} already holds a training run (train.json); continue it with --resume or choose another --out",
                out.display()
            ),
            RunLocked { out, holder } => write!(
                f,
                "{} is being trained by another process ({holder}); wait for it to end or stop it first",
                out.display()
            ),
            NoUsableCheckpoint { dir, problems } => write!(
                f,
                "--resume: no usable checkpoint in {}: {}",
                dir.display(),
                problems.join("; ")
            ),
            CheckpointUnreadable { path, problem } | CheckpointMismatch { path, problem } => {
                write!(f, "--resume: {}: {problem}", path.display())
            }
            EvalWindow { layer, kind } => write!(
                f,
                "layer {layer}: an evaluation window applies to full, sliding, sinks and SWAT \
                 layers (and sinks not to SWAT), not {kind:?}"
            ),
            Position { position, len } => {
                write!(f, "position {position} is past a sequence of {len} tokens")
            }
            Data(source) => write!(f, "cannot read tensor values: {source:?}"),
            Attention(source) => write!(f, "{source}"),
            Cluster { rank, problem } => write!(f, "rank {rank}: {problem}"),
            NotARun { run, source } => {
                write!(f, "{} is not a training run: {source}", run.display())
            }
            RunModel { run, source } => {
                write!(f, "the model of the run in {} cannot be loaded: {source}", run.display())
            }
        }
    }
}

impl std::error::Error for TrainingError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrainingError::Model(source) => Some(source),
            TrainingError::RunModel { source, .. } => Some(source.as_ref()),
            TrainingError::NotARun { source, .. } => Some(source.as_ref()),
            TrainingError::Loader { source, .. } => Some(source.as_ref()),
            TrainingError::ConfigUnreadable { source, .. } => Some(source),
            TrainingError::ConfigInvalid { source, .. } => Some(source),
            TrainingError::Write(error) => Some(error),
            _ => None,
        }
    }
}

impl From<ModelError> for TrainingError {
    fn from(error: ModelError) -> Self {
        TrainingError::Model(error)
    }
}

impl From<AttentionError> for TrainingError {
    fn from(error: AttentionError) -> Self {
        TrainingError::Attention(error)
    }
}

impl From<DataError> for TrainingError {
    fn from(error: DataError) -> Self {
        TrainingError::Data(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field_and_what_failed_where() {
        let field = TrainingError::field("TrainConfig.steps", "must be at least 1");
        assert_eq!(field.to_string(), "TrainConfig.steps: must be at least 1");
        let loader = TrainingError::TooFewTokens { tokens: 10, window: 17, batch: 2 }
            .in_loader("valid split");
        assert_eq!(
            loader.to_string(),
            "valid split: a split of 10 tokens cannot give windows of 17 tokens of text in \
             batches of 2"
        );
        assert!(std::error::Error::source(&loader).is_some());
    }
}
