//! [`Pretrained`]: a Hugging Face checkpoint as one value, its configuration, weights and
//! tokenizer read from its directory, `config.json` once.

use std::path::{Path, PathBuf};

use burn::tensor::backend::Backend;
use swa_attention::LayerOpsBackend;

use crate::hf::tokenizer::read_tokenizer;
use crate::hf::{
    Family, HfProblem, HfTokenizer, WeightPrecision, config_of, config_text, load_weights,
};
use crate::{Decoder, DecoderConfig, ModelError};

/// A Hugging Face checkpoint, loaded: what every `--hf DIR` command and a library user start
/// from.
///
/// ```no_run
/// # use burn::backend::NdArray;
/// use swa_models::hf::Pretrained;
///
/// let device = Default::default();
/// let checkpoint = Pretrained::<NdArray>::load("models/gemma-2-2b", &device)?;
/// let prompt = checkpoint.encode("The sliding window", true)?;
/// # Ok::<(), swa_models::ModelError>(())
/// ```
#[derive(Debug)]
pub struct Pretrained<B: Backend> {
    /// The checkpoint's directory.
    pub dir: PathBuf,
    /// The family `config.json` names (`model_type`).
    pub family: Family,
    /// Its decoder configuration, from `config.json`.
    pub config: DecoderConfig,
    /// The model, with the checkpoint's weights.
    pub model: Decoder<B>,
    /// Its tokenizer, from `tokenizer.json`.
    pub tokenizer: HfTokenizer,
}

impl<B: LayerOpsBackend> Pretrained<B> {
    /// Reads `dir`'s `config.json` (once), its weights and its tokenizer onto `device`, the
    /// weights in the backend's float type.
    pub fn load(dir: impl AsRef<Path>, device: &B::Device) -> Result<Self, ModelError> {
        Self::load_with(dir, WeightPrecision::Compute, device)
    }

    /// [`Pretrained::load`] with the linear layers' weights and the embedding table kept in
    /// `weights` ([`WeightPrecision`]): a bf16 checkpoint on the CPU in half the memory of f32.
    pub fn load_with(
        dir: impl AsRef<Path>,
        weights: WeightPrecision,
        device: &B::Device,
    ) -> Result<Self, ModelError> {
        let dir = dir.as_ref();
        let text = config_text(dir)?;
        let (family, config) = config_of(dir, &text)?;
        let model = load_weights::<B>(dir, family, &config, weights, device)?;
        let tokenizer = read_tokenizer(dir, config.vocab_size, &text)?;
        Ok(Self { dir: dir.to_path_buf(), family, config, model, tokenizer })
    }
}

impl<B: Backend> Pretrained<B> {
    /// The ids of `text`, with the tokenizer's special tokens (such as BOS) when `special` is
    /// set.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<usize>, ModelError> {
        self.tokenizer.encode(text, special).map_err(|problem| self.problem(problem))
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[usize]) -> Result<String, ModelError> {
        self.tokenizer.decode(ids).map_err(|problem| self.problem(problem))
    }

    /// A tokenizer's failure as this checkpoint's error.
    fn problem(&self, problem: HfProblem) -> ModelError {
        ModelError::Checkpoint { dir: self.dir.clone(), problem }
    }
}
