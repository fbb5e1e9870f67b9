//! What the commands that take `--hf DIR` share: the checkpoint's configuration, model and
//! tokenizer, read once (docs/semantics.md §9).

use std::path::Path;

use burn::tensor::backend::Backend;
use swa_models::hf::{self, HfTokenizer};
use swa_models::{Decoder, DecoderConfig, ModelError};

use crate::error::AppError;

/// A Hugging Face checkpoint, loaded.
pub struct HfRun<B: Backend> {
    /// Its decoder configuration.
    pub config: DecoderConfig,
    /// The model, with the checkpoint's weights.
    pub model: Decoder<B>,
    /// Its tokenizer.
    pub tokenizer: HfTokenizer,
}

impl<B: Backend> HfRun<B> {
    /// Reads `dir`'s configuration, weights and tokenizer.
    pub fn load(dir: &Path, device: &B::Device) -> Result<Self, AppError> {
        let (_, config) = hf::read_config(dir)?;
        let model = hf::load_decoder::<B>(dir, device)?;
        let tokenizer = hf::load_tokenizer(dir, config.vocab_size)?;
        Ok(Self { config, model, tokenizer })
    }

    /// The ids of `text`, with the tokenizer's special tokens when `special` is set.
    pub fn encode(&self, dir: &Path, text: &str, special: bool) -> Result<Vec<usize>, AppError> {
        self.tokenizer.encode(text, special).map_err(|problem| checkpoint(dir, problem))
    }
}

/// A tokenizer's failure as the checkpoint's error.
pub fn checkpoint(dir: &Path, problem: hf::HfProblem) -> AppError {
    AppError::Model(ModelError::Checkpoint { dir: dir.to_path_buf(), problem })
}
