//! The application's error: what a command, a benchmark, the backend check or a study could not
//! do, naming the flag, file, backend or step at fault. Failures of the library crates are
//! wrapped as they are.

use std::fmt;
use std::path::PathBuf;

use burn::tensor::backend::ExecutionError;
use swa_attention::AttentionError;
use swa_models::files::EXIT_WRITE_FAILED;
use swa_models::hf::WeightPrecision;
use swa_models::{LayerError, ModelError};
use swa_training::TrainingError;
use swa_training::run_lock::{EXIT_DIVERGED, EXIT_RUN_LOCKED, EXIT_STOPPED_BY_REQUEST};

use crate::choice::Precision;
use crate::report::ReportError;

/// Why a command, benchmark, check or study failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum AppError {
    /// Training, evaluation or a data source failed.
    Training(TrainingError),
    /// Building, running, saving or loading a model failed.
    Model(ModelError),
    /// An attention layer or window allocation rejected its configuration (the windowed
    /// core's errors come wrapped, as [`LayerError::Attention`]).
    Layer(LayerError),
    /// A figure or table could not be written.
    Report(ReportError),
    /// A file or folder could not be read, written or created.
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A flag's value cannot work.
    Flag {
        /// The flag, e.g. `--lengths`.
        flag: &'static str,
        /// What is wrong, as the rest of a sentence starting with the flag.
        problem: String,
    },
    /// No preset has this name.
    UnknownPreset {
        /// The name asked for.
        name: String,
    },
    /// A preset is not what a study needs.
    Preset {
        /// The preset's name.
        name: String,
        /// What is unexpected about it.
        problem: String,
    },
    /// This build has no such backend.
    NoBackend {
        /// The cargo feature that brings it.
        feature: &'static str,
    },
    /// A CPU backend was asked for in a `ddp` build, which cannot train on it.
    CpuInDdpBuild {
        /// The backend.
        backend: &'static str,
    },
    /// A CPU backend was asked for several devices.
    OneDevice {
        /// The backend.
        backend: &'static str,
    },
    /// Several devices were asked for a job that runs on one.
    SeveralDevices,
    /// The backend or its device cannot compute in the precision asked for.
    Precision {
        /// The precision asked for.
        precision: Precision,
        /// Why it cannot be had.
        problem: String,
    },
    /// Weights narrower than the computation were asked for where only the CPU backends keep
    /// them.
    Weights {
        /// The weights' float type asked for.
        weights: WeightPrecision,
        /// The backend.
        backend: &'static str,
        /// The computation's precision.
        precision: Precision,
    },
    /// A backend's default device does not answer a first tensor operation.
    NoDevice {
        /// The backend.
        backend: &'static str,
        /// The panic it raised.
        problem: String,
    },
    /// A backend panicked while running.
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// Waiting for the device's queued work failed.
    Sync(ExecutionError),
    /// Benchmark settings that cannot be measured.
    BenchSettings {
        /// What does not fit.
        problem: String,
    },
    /// A benchmark's anchor (a script of `benches/anchors/`) did not start, failed or printed
    /// no result.
    Anchor {
        /// The script.
        script: String,
        /// What went wrong: its error output, or why its line could not be read.
        problem: String,
    },
    /// A study's corpus cannot be read.
    StudyCorpus {
        /// Why the corpus could not be read.
        source: TrainingError,
    },
    /// The backend check's weights do not fit the model they were drawn for.
    WeightsMismatch {
        /// Burn's account of the tensors that failed, are missing or unused.
        problem: String,
    },
    /// Comparisons of the backend check failed.
    ChecksFailed {
        /// How many.
        count: usize,
    },
    /// A step of a command or study failed.
    Step {
        /// The step, e.g. `dilated attention at N = 512` or a model's run name.
        step: String,
        /// Why it failed.
        source: Box<AppError>,
    },
}

impl AppError {
    /// [`AppError::Step`]: `step` failed because of `source`.
    pub fn step(step: impl Into<String>, source: impl Into<AppError>) -> Self {
        AppError::Step { step: step.into(), source: Box::new(source.into()) }
    }

    /// Prints the error's one line, `error: …`, to standard error in a single write, so that
    /// the lines of several processes sharing a terminal (an MPI run's ranks) do not interleave.
    pub fn report(&self) {
        let line = format!("error: {self}\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }

    /// The process's exit status for this error (docs/reliability.md, "Exit statuses"):
    /// [`EXIT_RUN_LOCKED`] when another process trains the run, [`EXIT_WRITE_FAILED`] when a
    /// file could not be written, [`EXIT_STOPPED_BY_REQUEST`] when training was stopped by a
    /// signal, [`EXIT_DIVERGED`] when its loss stopped being finite, 1 for any other failure.
    pub fn exit_code(&self) -> i32 {
        use AppError::{Model, Report, Step, Training};
        match self {
            Training(TrainingError::RunLocked { .. }) => EXIT_RUN_LOCKED,
            Training(TrainingError::Stopped { .. }) => EXIT_STOPPED_BY_REQUEST,
            Training(TrainingError::Diverged { .. }) => EXIT_DIVERGED,
            Training(TrainingError::Write(_) | TrainingError::Model(ModelError::Write(_)))
            | Model(ModelError::Write(_))
            | Report(ReportError::Write(_)) => EXIT_WRITE_FAILED,
            Step { source, .. } => source.exit_code(),
            _ => 1,
        }
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use AppError::*;
        match self {
            Training(source) => write!(f, "{source}"),
            Model(source) => write!(f, "{source}"),
            Layer(source) => write!(f, "{source}"),
            Report(source) => write!(f, "{source}"),
            Io { path, source } => write!(f, "{}: {source}", path.display()),
            Flag { flag, problem } => write!(f, "{flag} {problem}"),
            UnknownPreset { name } => {
                write!(f, "no preset named `{name}`; `swa-zoo info --list` lists them")
            }
            Preset { name, problem } => write!(f, "preset {name}: {problem}"),
            NoBackend { feature } => {
                write!(
                    f,
                    "this build has no {feature} backend; rebuild with `--features {feature}`"
                )
            }
            CpuInDdpBuild { backend } => write!(
                f,
                "this build has the `ddp` feature, whose Burn `distributed` feature leaves {backend} \
                 without autodiff; use a build without `ddp` for the CPU backends"
            ),
            OneDevice { backend } => write!(
                f,
                "{backend} runs on one device, the CPU; --devices needs --backend wgpu or cuda"
            ),
            SeveralDevices => write!(f, "only `train` runs on several devices"),
            Precision { precision, problem } => {
                write!(f, "--precision {}: {problem}", precision.name())
            }
            Weights { weights, backend, precision } => write!(
                f,
                "--weights {} with --precision {} on {backend}: weights of another type than \
                 the computation are a CPU path (--backend flex or ndarray); on {backend}, \
                 --precision sets the type of the weights too",
                weights.name(),
                precision.name()
            ),
            NoDevice { backend, problem } => write!(f, "no {backend} device answers: {problem}"),
            Panicked { message } => write!(f, "panicked: {message}"),
            Sync(source) => write!(f, "device sync failed: {source:?}"),
            BenchSettings { problem } => write!(f, "{problem}"),
            Anchor { script, problem } => write!(f, "the anchor {script} failed: {problem}"),
            StudyCorpus { source } => {
                write!(f, "{source} (pass --corpus PATH for another text, or --corpus embedded)")
            }
            WeightsMismatch { problem } => write!(f, "the weights do not fit the model: {problem}"),
            ChecksFailed { count } => write!(f, "{count} comparisons failed"),
            Step { step, source } => write!(f, "{step}: {source}"),
        }
    }
}

impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppError::Training(source) | AppError::StudyCorpus { source } => Some(source),
            AppError::Model(source) => Some(source),
            AppError::Layer(source) => Some(source),
            AppError::Report(source) => Some(source),
            AppError::Io { source, .. } => Some(source),
            AppError::Step { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<TrainingError> for AppError {
    fn from(error: TrainingError) -> Self {
        AppError::Training(error)
    }
}

impl From<ModelError> for AppError {
    fn from(error: ModelError) -> Self {
        AppError::Model(error)
    }
}

impl From<AttentionError> for AppError {
    fn from(error: AttentionError) -> Self {
        AppError::Layer(error.into())
    }
}

impl From<LayerError> for AppError {
    fn from(error: LayerError) -> Self {
        AppError::Layer(error)
    }
}

impl From<ReportError> for AppError {
    fn from(error: ReportError) -> Self {
        AppError::Report(error)
    }
}

impl From<ExecutionError> for AppError {
    fn from(error: ExecutionError) -> Self {
        AppError::Sync(error)
    }
}
