//! Pretrained checkpoints from local Hugging Face directories (docs/semantics.md §9): Mistral,
//! Qwen2, Gemma 2, Gemma 3 (text) and Llama, read from `config.json` and `model.safetensors`
//! (or its shards), with their `tokenizer.json`; and a model trained here written back as such
//! a directory when one of these families expresses it.
//!
//! Where a directory is asked for, a GGUF file does as well ([`crate::gguf`]): its metadata
//! gives the configuration and the tokenizer, its tensors the weights.
//!
//! swa-zoo reads local files only: users download checkpoints with their own tools.

mod config;
mod export;
mod import;
mod names;
mod pretrained;
#[cfg(test)]
pub(crate) mod tests;
mod tokenizer;

use crate::gguf::{GgufCheckpoint, is_gguf};
use crate::{DecoderConfig, ModelError};

use std::fmt;
use std::fs;
use std::path::Path;

pub use config::parse as parse_config;
pub use export::{export_decoder, export_tokenizer};
pub use import::{WeightPrecision, load_decoder, load_weights};
pub use pretrained::Pretrained;
pub use tokenizer::{HfTokenizer, load_tokenizer};

/// The family and decoder configuration of the Hugging Face directory `dir`, from its
/// `config.json`, validated.
pub fn read_config(dir: &Path) -> Result<(Family, DecoderConfig), ModelError> {
    let text = config_text(dir)?;
    config_of(dir, &text)
}

/// The text of `dir/config.json`, or for a GGUF file the one its metadata makes
/// ([`GgufCheckpoint::config_json`]).
fn config_text(dir: &Path) -> Result<String, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    if is_gguf(dir) {
        return GgufCheckpoint::open(dir).and_then(|file| file.config_json()).map_err(fail);
    }
    fs::read_to_string(dir.join("config.json")).map_err(|_| fail(HfProblem::NoConfig))
}

/// [`read_config`] of `config.json`'s `text`, read from `dir`.
fn config_of(dir: &Path, text: &str) -> Result<(Family, DecoderConfig), ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    let (family, config) = parse_config(text).map_err(fail)?;
    config.validate()?;
    Ok((family, config))
}

/// The architectures swa-zoo imports, by `config.json`'s `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Family {
    /// `mistral`: sliding window on every layer, or none.
    Mistral,
    /// `qwen2`: q/k/v biases; sliding layers from `max_window_layers` on when
    /// `use_sliding_window` is set.
    Qwen2,
    /// `gemma2`: sliding and global layers alternating, softcaps, post-norms.
    Gemma2,
    /// `gemma3_text`: five sliding layers to one global, q/k norms, RoPE per layer type.
    Gemma3,
    /// `llama`: full attention, Llama 3 RoPE scaling.
    Llama,
}

impl Family {
    /// The `model_type` values swa-zoo reads.
    pub const SUPPORTED: &'static str = "mistral, qwen2, gemma2, gemma3_text, llama";

    /// The family of a `model_type`.
    pub fn from_model_type(model_type: &str) -> Result<Self, HfProblem> {
        Ok(match model_type {
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "gemma2" => Family::Gemma2,
            "gemma3_text" => Family::Gemma3,
            "llama" => Family::Llama,
            other => return Err(HfProblem::UnsupportedModelType { model_type: other.into() }),
        })
    }

    /// `config.json`'s `model_type` of the family.
    pub fn model_type(self) -> &'static str {
        match self {
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3_text",
            Family::Llama => "llama",
        }
    }
}

/// What is wrong with a Hugging Face directory, in [`crate::ModelError::Checkpoint`].
#[derive(Debug)]
#[non_exhaustive]
pub enum HfProblem {
    /// The directory has no `config.json`.
    NoConfig,
    /// `config.json` is not valid JSON or lacks a required field.
    BadConfig {
        /// The JSON reader's message.
        problem: String,
    },
    /// `model_type` names an architecture swa-zoo does not import.
    UnsupportedModelType {
        /// The value found.
        model_type: String,
    },
    /// A field of `config.json` holds what swa-zoo cannot express.
    BadField {
        /// The field.
        field: &'static str,
        /// Why.
        problem: String,
    },
    /// Neither `model.safetensors` nor `model.safetensors.index.json` is there.
    NoWeights,
    /// A shard listed in `model.safetensors.index.json` is absent.
    MissingShard {
        /// The shard's file name.
        shard: String,
    },
    /// A safetensors file (or the index) cannot be read: truncated, corrupt, or unreadable.
    CorruptFile {
        /// The file's name.
        file: String,
        /// The reader's message.
        problem: String,
    },
    /// A tensor the configuration needs is in no file.
    MissingTensor {
        /// The tensor's name in the checkpoint.
        name: String,
    },
    /// A file holds a tensor the configuration has no place for.
    UnexpectedTensor {
        /// The tensor's name in the checkpoint.
        name: String,
    },
    /// A tensor's shape is not the one the configuration implies.
    ShapeMismatch {
        /// The tensor's name in the checkpoint.
        name: String,
        /// Its shape in the file.
        file: Vec<usize>,
        /// The shape the configuration implies.
        expected: Vec<usize>,
    },
    /// `tokenizer.json` is missing or unreadable.
    Tokenizer {
        /// The reader's message.
        problem: String,
    },
    /// The tokenizer has ids the model's vocabulary does not.
    TokenizerVocab {
        /// Ids of the tokenizer.
        tokenizer: usize,
        /// The model's `vocab_size`.
        model: usize,
    },
    /// A GGUF file holds what swa-zoo does not read: an architecture, a tensor type, a
    /// version, or metadata it needs and lacks.
    Gguf {
        /// What, and what is supported.
        problem: String,
    },
    /// The model cannot be written as any supported family.
    NotExportable {
        /// What no family expresses.
        reason: String,
    },
    /// An export would replace a file of an existing checkpoint.
    WouldOverwrite {
        /// The file.
        file: String,
    },
}

impl std::error::Error for HfProblem {}

impl fmt::Display for HfProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HfProblem::NoConfig => write!(f, "no config.json (not a Hugging Face model directory)"),
            HfProblem::BadConfig { problem } => write!(f, "config.json: {problem}"),
            HfProblem::UnsupportedModelType { model_type } => write!(
                f,
                "config.json: model_type `{model_type}` is not supported (supported: {})",
                Family::SUPPORTED
            ),
            HfProblem::BadField { field, problem } => write!(f, "config.json: {field}: {problem}"),
            HfProblem::NoWeights => {
                write!(f, "no model.safetensors or model.safetensors.index.json")
            }
            HfProblem::MissingShard { shard } => {
                write!(f, "shard {shard}, listed in model.safetensors.index.json, is missing")
            }
            HfProblem::CorruptFile { file, problem } => {
                write!(f, "{file} is truncated or corrupt: {problem}")
            }
            HfProblem::MissingTensor { name } => write!(f, "tensor `{name}` is missing"),
            HfProblem::UnexpectedTensor { name } => {
                write!(f, "tensor `{name}` is not part of the configured model")
            }
            HfProblem::ShapeMismatch { name, file, expected } => write!(
                f,
                "tensor `{name}` has shape {file:?} in the file; the configuration implies {expected:?}"
            ),
            HfProblem::Tokenizer { problem } => write!(f, "tokenizer.json: {problem}"),
            HfProblem::TokenizerVocab { tokenizer, model } => write!(
                f,
                "tokenizer.json has {tokenizer} ids but the model's vocabulary has {model}"
            ),
            HfProblem::Gguf { problem } => write!(f, "GGUF: {problem}"),
            HfProblem::NotExportable { reason } => {
                write!(f, "no supported family expresses this model: {reason}")
            }
            HfProblem::WouldOverwrite { file } => {
                write!(f, "{file} exists; exporting never replaces a checkpoint")
            }
        }
    }
}
