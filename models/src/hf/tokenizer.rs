//! A checkpoint's `tokenizer.json`, through Hugging Face's `tokenizers` crate (built without
//! its network features: swa-zoo reads local files only), checked against the model's
//! vocabulary, with the end-of-sequence ids `config.json` names.

use std::fs;
use std::path::Path;

use serde_json::Value;
use tokenizers::Tokenizer;

use std::str::FromStr;

use crate::ModelError;
use crate::gguf::{GgufCheckpoint, is_gguf};
use crate::hf::HfProblem;
use crate::panics::without_panics;

/// Text to token ids and back, for one checkpoint.
pub struct HfTokenizer {
    inner: Tokenizer,
    /// Ids that end a sequence (`eos_token_id` of `config.json`, a number or a list).
    eos: Vec<usize>,
    /// The token the tokenizer puts before a text's own ([`HfTokenizer::bos`]).
    bos: Option<usize>,
}

/// Reads `dir/tokenizer.json` (for a GGUF file, the tokenizer of its metadata) for a model of
/// `vocab_size` ids; fails when the file is missing or unreadable, or when it has more ids than
/// the model.
pub fn load_tokenizer(dir: &Path, vocab_size: usize) -> Result<HfTokenizer, ModelError> {
    let config = super::config_text(dir).unwrap_or_default();
    read_tokenizer(dir, vocab_size, &config)
}

/// [`load_tokenizer`] with `config.json`'s text already read (an empty one names no
/// end-of-sequence ids).
pub(crate) fn read_tokenizer(
    dir: &Path,
    vocab_size: usize,
    config: &str,
) -> Result<HfTokenizer, ModelError> {
    let fail = |problem| ModelError::Checkpoint { dir: dir.to_path_buf(), problem };
    let json = match is_gguf(dir) {
        true => GgufCheckpoint::open(dir).and_then(|file| file.tokenizer_json()).map_err(fail)?,
        false => fs::read_to_string(dir.join("tokenizer.json"))
            .map_err(|e| fail(HfProblem::Tokenizer { problem: e.to_string() }))?,
    };
    let inner = without_panics("the tokenizers library", || Tokenizer::from_str(&json))
        .and_then(|read| read.map_err(|e| e.to_string()))
        .map_err(|problem| fail(HfProblem::Tokenizer { problem }))?;
    let tokenizer = inner.get_vocab_size(true);
    if tokenizer > vocab_size {
        return Err(fail(HfProblem::TokenizerVocab { tokenizer, model: vocab_size }));
    }
    let config: Value = serde_json::from_str(config).unwrap_or_default();
    let eos = match &config["eos_token_id"] {
        Value::Number(id) => id.as_u64().into_iter().map(|id| id as usize).collect(),
        Value::Array(ids) => ids.iter().filter_map(Value::as_u64).map(|id| id as usize).collect(),
        _ => Vec::new(),
    };
    let bos = leading_special(&inner);
    Ok(HfTokenizer { inner, eos, bos })
}

/// The one token `tokenizer` puts before a text's own ids when it adds its special tokens (a
/// BOS), found by encoding a probe both ways; `None` when it adds none before the text.
fn leading_special(tokenizer: &Tokenizer) -> Option<usize> {
    let probe = "a";
    let plain = tokenizer.encode(probe, false).ok()?;
    let special = tokenizer.encode(probe, true).ok()?;
    let text = plain.get_ids();
    match special.get_ids() {
        [first, rest @ ..] if !text.is_empty() && rest.starts_with(text) => Some(*first as usize),
        _ => None,
    }
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.inner.get_vocab_size(true))
            .field("eos", &self.eos)
            .field("bos", &self.bos)
            .finish()
    }
}

impl HfTokenizer {
    /// The ids of `text`, with the tokenizer's special tokens (a BOS, for most checkpoints)
    /// when `special` is set.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<usize>, HfProblem> {
        let encoding = self
            .inner
            .encode(text, special)
            .map_err(|e| HfProblem::Tokenizer { problem: e.to_string() })?;
        Ok(encoding.get_ids().iter().map(|&id| id as usize).collect())
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[usize]) -> Result<String, HfProblem> {
        let ids: Vec<u32> = ids.iter().map(|&id| id as u32).collect();
        self.inner.decode(&ids, true).map_err(|e| HfProblem::Tokenizer { problem: e.to_string() })
    }

    /// The vocabulary entry of `id` as the tokenizer stores it (e.g. `<s>`, `▁the`), or `None`
    /// outside the vocabulary: a name for a token, such as a special one, that decodes to no
    /// text.
    pub fn piece(&self, id: usize) -> Option<String> {
        self.inner.id_to_token(id as u32)
    }

    /// The token this tokenizer puts before every text it encodes with its special tokens
    /// (Gemma's `<bos>`, Llama's `<s>`), as the checkpoint saw at the start of each training
    /// sequence; `None` for tokenizers that add none (Qwen2, SmolLM2).
    pub fn bos(&self) -> Option<usize> {
        self.bos
    }

    /// Whether `id` ends a sequence.
    pub fn is_eos(&self, id: usize) -> bool {
        self.eos.contains(&id)
    }
}
