//! Token corpora for language modelling: a train / valid / test split of token ids, at the
//! level of bytes (vocabulary 256, as in enwik8 character-level modelling), of words (a
//! vocabulary built from the training split, as in WikiText-103), or of a pretrained checkpoint's
//! tokens (`crate::tokenized`: a text file or any burn-dataset `Dataset` of texts).
//!
//! Three sources of bytes and words:
//! - [`Corpus::embedded`]: the Book of Genesis (King James Bible, public domain), compiled into
//!   the binary so that training, tests and examples run with no download;
//! - [`Corpus::bytes_from_file`]: any file as bytes, with the standard enwik8 split when the file
//!   is named `enwik8`;
//! - [`Corpus::words_from_file`]: whitespace-separated words with `<eos>` per line and `<unk>`
//!   for rare words, with the WikiText layout (`wiki.{train,valid,test}.tokens`) recognised.
//!
//! Losses reported in nats convert to bits per unit with [`bits_per_unit`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use swa_models::hf::HfTokenizer;

use crate::error::TrainingError;

/// The embedded default corpus: the Book of Genesis, King James Bible (public domain).
pub(crate) const GENESIS: &str = include_str!("../data/genesis.txt");
/// Bytes of the standard enwik8 training split; valid and test take 5,000,000 each.
const ENWIK8_TRAIN: usize = 90_000_000;
const ENWIK8_HELD_OUT: usize = 5_000_000;
/// The end-of-line token of word corpora.
pub const EOS: &str = "<eos>";
/// The token of words outside the vocabulary.
pub const UNK: &str = "<unk>";

/// What one token stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// One byte of the text (vocabulary 256).
    Byte,
    /// One whitespace-separated word, `<eos>` or `<unk>`.
    Word,
    /// One token of a pretrained checkpoint's tokenizer.
    Token,
}

/// A tokenised corpus split into training, validation and test token streams.
#[derive(Debug, Clone)]
pub struct Corpus {
    name: String,
    unit: Unit,
    vocab_size: usize,
    train: Arc<Vec<u32>>,
    valid: Arc<Vec<u32>>,
    test: Arc<Vec<u32>>,
    /// The word of each id, for word corpora.
    words: Option<Vec<String>>,
    /// The tokenizer, for corpora of a checkpoint's tokens.
    tokenizer: Option<Arc<HfTokenizer>>,
}

/// Bits per unit (per byte, i.e. per character of enwik8, for byte corpora; per word for word
/// corpora) of a mean cross-entropy `loss_nats` in nats: `loss / ln 2`.
pub fn bits_per_unit(loss_nats: f64) -> f64 {
    loss_nats / std::f64::consts::LN_2
}

/// `[0, n·a/b)`: the index at fraction `a/b` of `n`, without overflow.
pub(crate) fn cut(n: usize, a: usize, b: usize) -> usize {
    (n as u128 * a as u128 / b as u128) as usize
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

fn read(path: &Path) -> Result<Vec<u8>, TrainingError> {
    std::fs::read(path).map_err(|e| TrainingError::CorpusUnreadable {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })
}

fn read_text(path: &Path) -> Result<String, TrainingError> {
    String::from_utf8(read(path)?).map_err(|e| TrainingError::CorpusUnreadable {
        path: path.to_path_buf(),
        problem: format!("not UTF-8 text: {e}"),
    })
}

/// Splits `bytes` 90% / 5% / 5%, each split at least 2 bytes.
fn split_bytes(bytes: &[u8], path: &Path) -> Result<[Vec<u32>; 3], TrainingError> {
    let n = bytes.len();
    let (a, b) = (cut(n, 9, 10), cut(n, 19, 20));
    let parts = [&bytes[..a], &bytes[a..b], &bytes[b..]];
    if parts.iter().any(|p| p.len() < 2) {
        let problem =
            format!("{n} bytes; a 90/5/5 split with at least 2 bytes per split needs at least 40");
        return Err(TrainingError::CorpusTooSmall { path: path.to_path_buf(), problem });
    }
    Ok(parts.map(|p| p.iter().map(|&b| b as u32).collect()))
}

impl Corpus {
    /// The embedded Book of Genesis, byte-level, split 90% / 5% / 5%.
    pub fn embedded() -> Corpus {
        let [train, valid, test] = split_bytes(GENESIS.as_bytes(), Path::new("genesis.txt"))
            .expect("the embedded corpus is large enough");
        Corpus::bytes("genesis".into(), train, valid, test)
    }

    fn bytes(name: String, train: Vec<u32>, valid: Vec<u32>, test: Vec<u32>) -> Corpus {
        let (train, valid, test) = (Arc::new(train), Arc::new(valid), Arc::new(test));
        let (words, tokenizer) = (None, None);
        Corpus { name, unit: Unit::Byte, vocab_size: 256, train, valid, test, words, tokenizer }
    }

    /// A corpus of `tokenizer`'s tokens, `vocab_size` of them, split as given.
    pub(crate) fn of_tokens(
        name: String,
        tokenizer: Arc<HfTokenizer>,
        vocab_size: usize,
        [train, valid, test]: [Vec<u32>; 3],
    ) -> Corpus {
        let (train, valid, test) = (Arc::new(train), Arc::new(valid), Arc::new(test));
        let tokenizer = Some(tokenizer);
        Corpus { name, unit: Unit::Token, vocab_size, train, valid, test, words: None, tokenizer }
    }

    /// A byte-level corpus from the file at `path`. A file named `enwik8` gets the standard split
    /// (the first 90,000,000 bytes train, the next 5,000,000 valid, the last 5,000,000 test) and
    /// must hold at least 100,000,000 bytes; any other file is split 90% / 5% / 5%.
    pub fn bytes_from_file(path: &Path) -> Result<Corpus, TrainingError> {
        let bytes = read(path)?;
        let name = file_name(path).to_string();
        let [train, valid, test] = if name == "enwik8" {
            let need = ENWIK8_TRAIN + 2 * ENWIK8_HELD_OUT;
            if bytes.len() < need {
                let problem = format!("{} bytes; the enwik8 split needs {need}", bytes.len());
                return Err(TrainingError::CorpusTooSmall { path: path.to_path_buf(), problem });
            }
            let widen = |s: &[u8]| s.iter().map(|&b| b as u32).collect::<Vec<u32>>();
            let end = ENWIK8_TRAIN + ENWIK8_HELD_OUT;
            [
                widen(&bytes[..ENWIK8_TRAIN]),
                widen(&bytes[ENWIK8_TRAIN..end]),
                widen(&bytes[bytes.len() - ENWIK8_HELD_OUT..]),
            ]
        } else {
            split_bytes(&bytes, path)?
        };
        Ok(Corpus::bytes(name, train, valid, test))
    }

    /// A word-level corpus from the file at `path`: whitespace-separated words, `<eos>` at the end
    /// of every line (as for WikiText), and `<unk>` for words seen fewer than `min_count` times in
    /// the training split or not at all. The vocabulary comes from the training split only, with
    /// ids by decreasing frequency then lexicographic order (`<eos>` and `<unk>` always present).
    ///
    /// A file named `wiki.train.tokens` is the training split and its siblings
    /// `wiki.valid.tokens` and `wiki.test.tokens` the others (the WikiText-103 layout); any other
    /// file is split 90% / 5% / 5% by lines, each split at least 2 tokens.
    pub fn words_from_file(path: &Path, min_count: usize) -> Result<Corpus, TrainingError> {
        let name = file_name(path).to_string();
        let texts: [String; 3] = if name == "wiki.train.tokens" {
            let sibling = |s: &str| read_text(&path.with_file_name(s));
            [read_text(path)?, sibling("wiki.valid.tokens")?, sibling("wiki.test.tokens")?]
        } else {
            let text = read_text(path)?;
            let lines: Vec<&str> = text.lines().collect();
            let (a, b) = (cut(lines.len(), 9, 10), cut(lines.len(), 19, 20));
            [lines[..a].join("\n"), lines[a..b].join("\n"), lines[b..].join("\n")]
        };
        let [train, valid, test] = texts.each_ref().map(|t| words_of(t));
        if let Some(i) = [&train, &valid, &test].iter().position(|s| s.len() < 2) {
            let problem =
                format!("the {} split has fewer than 2 words", ["train", "valid", "test"][i]);
            return Err(TrainingError::CorpusTooSmall { path: path.to_path_buf(), problem });
        }
        let words = vocabulary(&train, min_count.max(1));
        let index: HashMap<&str, u32> =
            words.iter().enumerate().map(|(i, w)| (w.as_str(), i as u32)).collect();
        let unk = index[UNK];
        let ids = |split: &[&str]| {
            Arc::new(split.iter().map(|w| *index.get(w).unwrap_or(&unk)).collect::<Vec<u32>>())
        };
        let (train, valid, test) = (ids(&train), ids(&valid), ids(&test));
        Ok(Corpus {
            name,
            unit: Unit::Word,
            vocab_size: words.len(),
            train,
            valid,
            test,
            words: Some(words),
            tokenizer: None,
        })
    }

    /// The corpus of a run: the text file `file` at the byte level, or at the word level with the
    /// words seen at least `word_min_count` times ([`Corpus::words_from_file`]); the embedded one
    /// without a file.
    pub fn load(
        file: Option<&Path>,
        word_min_count: Option<usize>,
    ) -> Result<Corpus, TrainingError> {
        match (file, word_min_count) {
            (None, _) => Ok(Corpus::embedded()),
            (Some(path), None) => Corpus::bytes_from_file(path),
            (Some(path), Some(min_count)) => Corpus::words_from_file(path, min_count),
        }
    }

    /// The corpus's name: `genesis` for the embedded one, else the file name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// What a token stands for.
    pub fn unit(&self) -> Unit {
        self.unit
    }
    /// The unit that bits are reported per, as the literature names it: `byte`, `character` for
    /// enwik8's bytes (bits per character) and `word`.
    pub fn unit_name(&self) -> &'static str {
        match (self.unit, self.name.as_str()) {
            (Unit::Word, _) => "word",
            (Unit::Token, _) => "token",
            (Unit::Byte, "enwik8") => "character",
            (Unit::Byte, _) => "byte",
        }
    }
    /// Number of distinct token ids: 256 for bytes, the vocabulary for words or tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
    /// The training tokens (a cheap shared handle).
    pub fn train(&self) -> Arc<Vec<u32>> {
        self.train.clone()
    }
    /// The validation tokens (a cheap shared handle).
    pub fn valid(&self) -> Arc<Vec<u32>> {
        self.valid.clone()
    }
    /// The test tokens (a cheap shared handle).
    pub fn test(&self) -> Arc<Vec<u32>> {
        self.test.clone()
    }

    /// The text of `tokens`: bytes decoded as UTF-8 (invalid sequences become U+FFFD); words
    /// joined by spaces with `<eos>` as a newline; a checkpoint's tokens as its tokenizer
    /// decodes them. Ids outside the vocabulary read as `?` (bytes) or `<unk>` (words), and
    /// tokens the tokenizer cannot decode as nothing.
    pub fn decode(&self, tokens: &[usize]) -> String {
        if let Some(tokenizer) = &self.tokenizer {
            return tokenizer.decode(tokens).unwrap_or_default();
        }
        let Some(words) = &self.words else {
            let bytes: Vec<u8> = tokens.iter().map(|&t| u8::try_from(t).unwrap_or(b'?')).collect();
            return String::from_utf8_lossy(&bytes).into_owned();
        };
        let mut text = String::new();
        for &t in tokens {
            match words.get(t).map_or(UNK, String::as_str) {
                EOS => text.push('\n'),
                word => {
                    if !(text.is_empty() || text.ends_with('\n')) {
                        text.push(' ');
                    }
                    text.push_str(word);
                }
            }
        }
        text
    }

    /// The tokens of `text`: its bytes, its words with `<eos>` for each newline and `<unk>`
    /// for words outside the vocabulary, or a checkpoint's tokens without special ones (none
    /// where its tokenizer fails).
    pub fn encode(&self, text: &str) -> Vec<usize> {
        if let Some(tokenizer) = &self.tokenizer {
            return tokenizer.encode(text, false).unwrap_or_default();
        }
        let Some(words) = &self.words else {
            return text.bytes().map(usize::from).collect();
        };
        let id = |w: &str| words.iter().position(|v| v == w);
        let unk = id(UNK).unwrap_or(0);
        let mut tokens = Vec::new();
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                tokens.push(id(EOS).unwrap_or(unk));
            }
            tokens.extend(line.split_whitespace().map(|w| id(w).unwrap_or(unk)));
        }
        tokens
    }
}

/// The words of `text`, with `<eos>` after every line.
fn words_of(text: &str) -> Vec<&str> {
    text.lines().flat_map(|line| line.split_whitespace().chain(std::iter::once(EOS))).collect()
}

/// The vocabulary of `train`: words seen at least `min_count` times, `<eos>` and `<unk>` (which
/// counts the words it replaces), by decreasing count then lexicographically.
fn vocabulary(train: &[&str], min_count: usize) -> Vec<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for w in train {
        *counts.entry(w).or_default() += 1;
    }
    let mut unk = counts.remove(UNK).unwrap_or(0);
    let mut kept: Vec<(&str, usize)> = Vec::new();
    for (w, c) in counts {
        match c >= min_count || w == EOS {
            true => kept.push((w, c)),
            false => unk += c,
        }
    }
    if !kept.iter().any(|(w, _)| *w == EOS) {
        kept.push((EOS, 0));
    }
    kept.push((UNK, unk));
    kept.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    kept.into_iter().map(|(w, _)| w.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    /// A fresh path in the temp folder: `<dir unique to this test>/<name>`.
    fn temp_file(test: &str, name: &str, contents: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("swa-corpus-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn embedded_corpus_is_split_90_5_5() {
        let corpus = Corpus::embedded();
        let n = GENESIS.len();
        assert_eq!(corpus.train().len(), n * 9 / 10);
        assert_eq!(corpus.valid().len(), n * 19 / 20 - n * 9 / 10);
        assert_eq!(corpus.train().len() + corpus.valid().len() + corpus.test().len(), n);
        assert_eq!(
            (corpus.vocab_size(), corpus.unit(), corpus.name()),
            (256, Unit::Byte, "genesis")
        );
        assert!(
            corpus
                .decode(&corpus.train()[..40].iter().map(|&t| t as usize).collect::<Vec<_>>())
                .contains("beginning")
        );
    }

    #[test]
    fn a_short_enwik8_is_an_error_naming_the_file() {
        let path = temp_file("enwik8", "enwik8", &[b'a'; 1000]);
        let error = Corpus::bytes_from_file(&path).unwrap_err().to_string();
        assert!(
            error.contains(&path.display().to_string()) && error.contains("100000000"),
            "{error}"
        );
        // The same bytes under another name get the 90/5/5 split.
        let other = temp_file("enwik8", "other.txt", &[b'a'; 1000]);
        let corpus = Corpus::bytes_from_file(&other).unwrap();
        assert_eq!(
            [corpus.train().len(), corpus.valid().len(), corpus.test().len()],
            [900, 50, 50]
        );
        let tiny = temp_file("enwik8", "tiny.txt", b"0123456789");
        assert!(Corpus::bytes_from_file(&tiny).unwrap_err().to_string().contains("tiny.txt"));
    }

    #[test]
    fn bytes_round_trip() {
        let corpus = Corpus::embedded();
        let text = "In the beginning — ünïcode too.";
        assert_eq!(corpus.decode(&corpus.encode(text)), text);
    }

    #[test]
    fn word_vocabulary_comes_from_train_with_unk() {
        let mut text = String::new();
        for i in 0..18 {
            text.push_str(&format!("the cat sat {}\n", if i == 0 { "rare" } else { "down" }));
        }
        text.push_str("the dog sat\nthe cat ran\n");
        let path = temp_file("words", "words.txt", text.as_bytes());
        let corpus = Corpus::words_from_file(&path, 2).unwrap();
        assert_eq!(corpus.unit(), Unit::Word);
        // train: 18 lines; "rare" is seen once, "dog" and "ran" only outside train.
        let words = corpus.words.as_ref().unwrap();
        assert_eq!(words, &["<eos>", "cat", "sat", "the", "down", "<unk>"]);
        assert_eq!(corpus.decode(&corpus.encode("the dog sat\nthe cat")), "the <unk> sat\nthe cat");
        assert_eq!(
            corpus.decode(&corpus.valid().iter().map(|&t| t as usize).collect::<Vec<_>>()),
            "the <unk> sat\n"
        );
        assert_eq!(corpus.train()[3], words.iter().position(|w| w == UNK).unwrap() as u32);
    }

    #[test]
    fn wikitext_layout_uses_the_sibling_files() {
        temp_file("wiki", "wiki.valid.tokens", b" a b \n");
        temp_file("wiki", "wiki.test.tokens", b" b c \n");
        let train = temp_file("wiki", "wiki.train.tokens", b" a a b \n");
        let corpus = Corpus::words_from_file(&train, 1).unwrap();
        assert_eq!((corpus.train().len(), corpus.valid().len(), corpus.test().len()), (4, 3, 3));
        assert_eq!(
            corpus.decode(&corpus.test().iter().map(|&t| t as usize).collect::<Vec<_>>()),
            "b <unk>\n"
        );
        std::fs::remove_file(train.with_file_name("wiki.test.tokens")).unwrap();
        let error = Corpus::words_from_file(&train, 1).unwrap_err().to_string();
        assert!(error.contains("wiki.test.tokens"), "{error}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_the_path() {
        let path = std::env::temp_dir().join("swa-corpus-no-such-file.txt");
        for error in [
            Corpus::bytes_from_file(&path).unwrap_err(),
            Corpus::words_from_file(&path, 1).unwrap_err(),
        ] {
            assert!(error.to_string().contains(&path.display().to_string()), "{error}");
        }
    }

    #[test]
    fn bits_are_reported_per_byte_character_or_word() {
        assert_eq!(Corpus::embedded().unit_name(), "byte");
        let enwik8 = Corpus::bytes("enwik8".into(), vec![0; 4], vec![0; 2], vec![0; 2]);
        assert_eq!(enwik8.unit_name(), "character");
        let path = temp_file("unit", "words.txt", "a b\n".repeat(40).as_bytes());
        assert_eq!(Corpus::words_from_file(&path, 1).unwrap().unit_name(), "word");
    }

    #[test]
    fn bits_are_nats_over_ln_2() {
        assert!((bits_per_unit(std::f64::consts::LN_2 * 1.5) - 1.5).abs() < 1e-12);
    }
}
