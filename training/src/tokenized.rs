//! Corpora of a pretrained checkpoint's tokens, for fine-tuning it: a text file, or any
//! burn-dataset [`Dataset`] of texts, tokenized by the checkpoint's own tokenizer and split by
//! tokens, the first 90% to train on and 5% each to validate and test (MSWA §5.2 fine-tunes on
//! one corpus and scores the held-out text).

use std::path::Path;
use std::sync::Arc;

use burn::data::dataset::Dataset;
use swa_models::hf::HfTokenizer;

use crate::corpus::{Corpus, cut};
use crate::error::TrainingError;

/// The text file at `path` in `tokenizer`'s tokens ([`tokenized_text`]).
pub fn tokenized_file(
    path: &Path,
    tokenizer: Arc<HfTokenizer>,
    vocab_size: usize,
) -> Result<Corpus, TrainingError> {
    let text = std::fs::read_to_string(path).map_err(|e| TrainingError::CorpusUnreadable {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })?;
    let name = path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
    tokenized_text(name, &text, tokenizer, vocab_size)
}

/// `text` in `tokenizer`'s tokens (`vocab_size` of them), without special tokens (the loader
/// puts the checkpoint's BOS before each window, [`crate::loader::LoaderConfig::with_bos`]),
/// named `name`.
pub fn tokenized_text(
    name: String,
    text: &str,
    tokenizer: Arc<HfTokenizer>,
    vocab_size: usize,
) -> Result<Corpus, TrainingError> {
    let ids = tokenizer.encode(text, false).map_err(|e| TrainingError::CorpusUnreadable {
        path: name.clone().into(),
        problem: e.to_string(),
    })?;
    split(name, ids, tokenizer, vocab_size)
}

/// The texts of `texts` in `tokenizer`'s tokens, one after another, each after the tokenizer's
/// BOS where it adds one (as the checkpoint saw documents in pretraining), named `name`.
pub fn tokenized_texts(
    name: &str,
    texts: &impl Dataset<String>,
    tokenizer: Arc<HfTokenizer>,
    vocab_size: usize,
) -> Result<Corpus, TrainingError> {
    let mut ids = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let problem = |e: swa_models::hf::HfProblem| TrainingError::CorpusUnreadable {
            path: format!("{name}[{i}]").into(),
            problem: e.to_string(),
        };
        ids.extend(tokenizer.bos());
        ids.extend(tokenizer.encode(&text, false).map_err(problem)?);
    }
    split(name.to_string(), ids, tokenizer, vocab_size)
}

/// Splits `ids` 90% / 5% / 5%, each split at least 2 tokens, each id below `vocab_size`.
fn split(
    name: String,
    ids: Vec<usize>,
    tokenizer: Arc<HfTokenizer>,
    vocab_size: usize,
) -> Result<Corpus, TrainingError> {
    let n = ids.len();
    let (a, b) = (cut(n, 9, 10), cut(n, 19, 20));
    if [a, b - a, n - b].iter().any(|&len| len < 2) {
        let problem = format!("{n} tokens; a 90/5/5 split with at least 2 per split needs 40");
        return Err(TrainingError::CorpusTooSmall { path: name.into(), problem });
    }
    if let Some(&id) = ids.iter().find(|&&id| id >= vocab_size) {
        let problem = format!("token {id} is past the model's {vocab_size} embeddings");
        return Err(TrainingError::CorpusUnreadable { path: name.into(), problem });
    }
    let ids: Vec<u32> = ids.into_iter().map(|id| id as u32).collect();
    let splits = [ids[..a].to_vec(), ids[a..b].to_vec(), ids[b..].to_vec()];
    Ok(Corpus::of_tokens(name, tokenizer, vocab_size, splits))
}

#[cfg(test)]
mod tests {
    use burn::data::dataset::InMemDataset;
    use swa_models::hf::load_tokenizer;

    use super::*;

    /// The tokenizer of the repository's tiny GGUF fixture: byte-level BPE of 512 ids, a BOS.
    fn tokenizer() -> Arc<HfTokenizer> {
        let fixture =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/gguf/tiny/model.gguf");
        Arc::new(load_tokenizer(Path::new(fixture), 512).unwrap())
    }

    #[test]
    fn texts_of_a_dataset_each_follow_the_bos_and_split_90_5_5() {
        let tokenizer = tokenizer();
        let bos = tokenizer.bos().expect("the fixture adds a BOS") as u32;
        let line = "In the beginning God created the heaven and the earth. ";
        let texts: Vec<String> = (1..=3).map(|n| line.repeat(4 * n)).collect();
        let dataset = InMemDataset::new(texts.clone());
        let corpus = tokenized_texts("genesis", &dataset, tokenizer.clone(), 512).unwrap();
        let all: Vec<u32> = [corpus.train(), corpus.valid(), corpus.test()]
            .iter()
            .flat_map(|s| s.to_vec())
            .collect();
        let mut expected = Vec::new();
        for text in &texts {
            expected.push(bos);
            expected.extend(tokenizer.encode(text, false).unwrap().iter().map(|&id| id as u32));
        }
        assert_eq!(all, expected);
        assert_eq!(corpus.train().len(), all.len() * 9 / 10);
        assert_eq!(corpus.unit_name(), "token");
        assert_eq!(
            corpus.decode(&[expected[1] as usize]),
            tokenizer.decode(&[expected[1] as usize]).unwrap()
        );
    }

    #[test]
    fn a_text_too_short_or_past_the_vocabulary_is_refused_by_name() {
        let short = tokenized_text("short".into(), "In the beginning", tokenizer(), 512);
        let message = short.unwrap_err().to_string();
        assert!(message.contains("short") && message.contains("tokens"), "{message}");
        let text = "In the beginning God created the heaven and the earth. ".repeat(8);
        let small = tokenized_text("kjv".into(), &text, tokenizer(), 8).unwrap_err().to_string();
        assert!(small.contains("past the model's 8 embeddings"), "{small}");
    }
}
