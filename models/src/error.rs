//! Errors of model configuration and weights, each naming the problem.

use std::fmt;
use std::path::PathBuf;

use burn::tensor::DType;

use crate::files::WriteError;
use crate::hf::HfProblem;
use crate::layers::LayerError;

/// Why a model could not be built, run, saved or loaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum ModelError {
    /// A field of the model configuration is invalid.
    Config {
        /// The field, as `Config.field`.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A layer's attention rejected its configuration or its input.
    Layer {
        /// The layer index.
        layer: usize,
        /// The layer's error.
        source: LayerError,
    },
    /// A weights file does not hold weights for the configuration.
    Weights {
        /// The file.
        path: PathBuf,
        /// What is wrong: the I/O error, the corrupt format, or the weight that is missing,
        /// unexpected or of the wrong shape.
        problem: String,
        /// The library's error behind `problem` when a read failed in one (Burn's recorder, the
        /// safetensors store); `None` for a mismatch found here.
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A file (weights, a record, an export) could not be written: the file and the operating
    /// system's reason.
    Write(WriteError),
    /// Weights were asked for in a float type the backend cannot hold tensors of (ndarray has no
    /// bf16 or f16 tensors; flex has).
    WeightType {
        /// The type asked for.
        dtype: DType,
    },
    /// Weights were asked to be kept packed (`--weights q8_0|q4_0|q4_1`) on a backend that keeps
    /// no packed weights (only flex does, for inference).
    PackedWeights {
        /// The block format asked for.
        packing: &'static str,
    },
    /// A Hugging Face directory could not be read or written (docs/semantics.md §9).
    Checkpoint {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: HfProblem,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelError::Config { field, problem } => write!(f, "{field}: {problem}"),
            ModelError::Layer { layer, source } => write!(f, "layer {layer}: {source}"),
            ModelError::Weights { path, problem, .. } => write!(f, "{}: {problem}", path.display()),
            ModelError::Checkpoint { dir, problem } => write!(f, "{}: {problem}", dir.display()),
            ModelError::Write(error) => error.fmt(f),
            ModelError::PackedWeights { packing } => write!(
                f,
                "weights packed in {packing}: this backend keeps no packed weights (flex does, \
                 without autodiff)"
            ),
            ModelError::WeightType { dtype } => write!(
                f,
                "weights in {dtype:?}: this backend cannot hold tensors of that type (flex can)"
            ),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModelError::Layer { source, .. } => Some(source),
            ModelError::Checkpoint { problem, .. } => Some(problem),
            ModelError::Weights { source, .. } => source.as_deref().map(|source| source as _),
            ModelError::Write(error) => Some(error),
            ModelError::Config { .. }
            | ModelError::WeightType { .. }
            | ModelError::PackedWeights { .. } => None,
        }
    }
}

/// Tags a layer's error (or the windowed core's, which it wraps) with its layer.
pub(crate) fn in_layer<E: Into<LayerError>>(layer: usize) -> impl Fn(E) -> ModelError {
    move |source| ModelError::Layer { layer, source: source.into() }
}
