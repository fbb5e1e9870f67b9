//! A GGUF file's tokenizer, from its metadata (`tokenizer.ggml.*`), written as the
//! `tokenizer.json` transformers builds from the same file (its `gguf_tokenizer_mapping.py`),
//! so that text tokenizes here exactly as transformers tokenizes it:
//! - `gpt2`: byte-level BPE, the vocabulary spelled in GPT-2's byte alphabet, the file's
//!   merges, GPT-2's split or the one `tokenizer.ggml.pre` names;
//! - `llama`: SentencePiece BPE with byte fallback, the file's merges or those its scores imply;
//!   Gemma's with its own spelling of spaces and merges in vocabulary order.
//!
//! Control tokens are kept whole as special tokens, user-defined ones as added tokens, and a
//! BOS goes before each text when `tokenizer.ggml.add_bos_token` says so.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};

use super::file::MetaValue;
use crate::hf::HfProblem;

/// llama.cpp's token type of a control token (`<|endoftext|>`, `<bos>`).
const CONTROL: u64 = 3;
/// llama.cpp's token type of a user-defined token (`<think>`).
const USER_DEFINED: u64 = 4;

/// Llama 3's split, for the `tokenizer.ggml.pre` values that name it.
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2's split, for the `tokenizer.ggml.pre` values that name it.
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// `tokenizer.ggml.pre` values whose split transformers sets instead of GPT-2's, and the split.
const SPLITS: [(&str, &str); 6] = [
    ("llama3", LLAMA3_SPLIT),
    ("llama-v3", LLAMA3_SPLIT),
    ("llama-bpe", LLAMA3_SPLIT),
    ("smaug-bpe", LLAMA3_SPLIT),
    ("qwen2", QWEN2_SPLIT),
    ("deepseek-r1-qwen", QWEN2_SPLIT),
];

/// The metadata's tokenizer entries, read.
struct Entries<'a> {
    metadata: &'a BTreeMap<String, MetaValue>,
}

impl<'a> Entries<'a> {
    fn get(&self, key: &str) -> Option<&'a MetaValue> {
        self.metadata.get(&format!("tokenizer.ggml.{key}"))
    }

    fn text(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(MetaValue::as_str)
    }

    fn strings(&self, key: &str) -> Result<Vec<&'a str>, HfProblem> {
        let Some(MetaValue::Array(items)) = self.get(key) else {
            return Err(problem(format!("no string array `tokenizer.ggml.{key}`")));
        };
        let not_text = || problem(format!("`tokenizer.ggml.{key}` holds a value that is not text"));
        items.iter().map(|item| item.as_str().ok_or_else(not_text)).collect()
    }
}

/// A tokenizer problem of the metadata.
fn problem(problem: String) -> HfProblem {
    HfProblem::Tokenizer { problem: format!("GGUF metadata: {problem}") }
}

/// The `tokenizer.json` text of `metadata`'s tokenizer, for a model of `architecture`; an
/// error naming what is missing or which tokenizer model is not supported.
pub fn tokenizer_json(
    metadata: &BTreeMap<String, MetaValue>,
    architecture: &str,
) -> Result<String, HfProblem> {
    let entries = Entries { metadata };
    let model = entries.text("model").ok_or_else(|| problem("no `tokenizer.ggml.model`".into()))?;
    let tokens = entries.strings("tokens")?;
    let types: Vec<u64> = match entries.get("token_type") {
        Some(MetaValue::Array(items)) => items.iter().map(|t| t.as_u64().unwrap_or(1)).collect(),
        _ => Vec::new(),
    };
    let gemma = architecture.starts_with("gemma");
    let mut json = match model {
        "gpt2" => {
            let split = SPLITS.iter().find(|(pre, _)| Some(*pre) == entries.text("pre"));
            byte_level(&tokens, &entries.strings("merges")?, split.map(|s| s.1))
        }
        "llama" if gemma => gemma_sentencepiece(&tokens),
        "llama" => sentencepiece(&tokens, &entries)?,
        other => {
            let problem_text = format!("tokenizer model `{other}` is not supported (gpt2, llama)");
            return Err(problem(problem_text));
        }
    };
    let vocab = json["model"]["vocab"].as_object().expect("every builder writes one");
    json["added_tokens"] = json!(added_tokens(&tokens, &types, model == "gpt2", vocab));
    // SentencePiece files that do not say add a BOS, as llama.cpp does.
    let add_bos = match entries.get("add_bos_token") {
        Some(MetaValue::Bool(add)) => *add,
        _ => model == "llama",
    };
    let bos = match (add_bos, entries.get("bos_token_id").and_then(MetaValue::as_u64)) {
        (true, Some(id)) => {
            let token = tokens.get(id as usize);
            Some((*token.ok_or_else(|| problem(format!("BOS id {id} is not a token")))?, id))
        }
        (true, None) => return Err(problem("a BOS is to be added but none is named".into())),
        (false, _) => None,
    };
    json["post_processor"] = post_processor(bos);
    json["version"] = json!("1.0");
    Ok(json.to_string())
}

/// A BPE model's fields beside its vocabulary and merges.
/// A SentencePiece one fuses unknown pieces and falls back to bytes; Gemma's names its unknown
/// token.
fn bpe(
    vocab: serde_json::Map<String, Value>,
    merges: Vec<[&str; 2]>,
    sentencepiece: bool,
    unknown: Option<&str>,
) -> Value {
    let (prefix, fuse) = match sentencepiece {
        true => (Value::Null, true),
        false => (json!(""), false),
    };
    json!({
        "type": "BPE", "dropout": null, "unk_token": unknown,
        "continuing_subword_prefix": prefix, "end_of_word_suffix": prefix,
        "fuse_unk": fuse, "byte_fallback": sentencepiece, "ignore_merges": false,
        "vocab": vocab, "merges": merges,
    })
}

/// The file's merges, `"a b"` each, as pairs.
fn pairs<'a>(merges: &[&'a str]) -> Vec<[&'a str; 2]> {
    merges.iter().map(|m| m.split_once(' ').map_or([*m, ""], |(a, b)| [a, b])).collect()
}

/// Byte-level BPE (`gpt2`): GPT-2's split, or `split` then the byte alphabet.
fn byte_level(tokens: &[&str], merges: &[&str], split: Option<&str>) -> Value {
    let bytes = json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                       "use_regex": split.is_none()});
    let pre_tokenizer = match split {
        None => bytes,
        Some(pattern) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            bytes,
        ]}),
    };
    json!({
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": bpe(byte_vocabulary(tokens), pairs(merges), false, None),
    })
}

/// SentencePiece BPE (`llama`, Llama 2 and Mistral files): a `▁` before the text and for each
/// space, bytes for what the vocabulary lacks; the file's merges, or those its scores imply.
fn sentencepiece(tokens: &[&str], entries: &Entries) -> Result<Value, HfProblem> {
    let merges = match entries.get("merges") {
        Some(_) => pairs(&entries.strings("merges")?),
        None => {
            let Some(MetaValue::Array(scores)) = entries.get("scores") else {
                return Err(problem("neither `tokenizer.ggml.merges` nor `.scores`".into()));
            };
            let scores: Vec<f64> = scores.iter().map(|s| s.as_f64().unwrap_or(0.0)).collect();
            implied_merges(tokens, |id| scores.get(id).copied().unwrap_or(0.0))
        }
    };
    Ok(json!({
        "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u{2581}", "prepend_scheme": "first", "split": false},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": bpe(plain_vocabulary(tokens), merges, true, None),
    }))
}

/// Gemma's SentencePiece BPE: spaces become `▁` with no `▁` before the text, tokens of white
/// space with a space in them are spelled as as many `▁`, and the merges are those the vocabulary implies in file order
/// (Gemma's scores do not follow its merge order).
fn gemma_sentencepiece(tokens: &[&str]) -> Value {
    let spaces = |t: &&str| t.contains(' ') && t.trim().is_empty();
    let respelled: Vec<String> = tokens
        .iter()
        .map(|t| match spaces(t) {
            true => "\u{2581}".repeat(t.chars().count()),
            false => t.to_string(),
        })
        .collect();
    let respelled: Vec<&str> = respelled.iter().map(String::as_str).collect();
    let merges = implied_merges(&respelled, |id| -(id as f64));
    let space = json!({"String": " "});
    json!({
        "normalizer": {"type": "Replace", "pattern": space, "content": "\u{2581}"},
        "pre_tokenizer": {"type": "Split", "pattern": space, "behavior": "MergedWithPrevious", "invert": false},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
        ]},
        "model": bpe(plain_vocabulary(&respelled), merges, true, Some("<unk>")),
    })
}

/// The merges a vocabulary implies (transformers' `generate_merges`): every split of a token
/// into two tokens, the best score first (a token listed twice scores as its last place), then
/// the longer left piece, then the longer right one, then the vocabulary's order.
fn implied_merges<'a>(tokens: &[&'a str], score: impl Fn(usize) -> f64) -> Vec<[&'a str; 2]> {
    let mut last = HashMap::with_capacity(tokens.len());
    let mut order = Vec::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        if last.insert(*token, id).is_none() {
            order.push(*token);
        }
    }
    let mut splits = Vec::new();
    for token in order {
        let best = score(last[token]);
        let cuts = token.char_indices().map(|(at, _)| at).filter(|&at| at > 0).rev();
        for at in cuts {
            let (left, right) = token.split_at(at);
            if last.contains_key(left) && last.contains_key(right) {
                splits.push((best, [left, right]));
            }
        }
    }
    // Stable: equal keys keep the order above.
    let length = |piece: &str| piece.chars().count();
    splits.sort_by(|(a, [al, ar]), (b, [bl, br])| {
        (b.total_cmp(a)).then(length(bl).cmp(&length(al))).then(length(br).cmp(&length(ar)))
    });
    splits.into_iter().map(|(_, pair)| pair).collect()
}

/// The vocabulary by token as the file spells it (a token listed twice keeps its last id).
fn plain_vocabulary(tokens: &[&str]) -> serde_json::Map<String, Value> {
    tokens.iter().enumerate().map(|(id, token)| (token.to_string(), json!(id))).collect()
}

/// GPT-2's byte alphabet: the printable bytes stand for themselves, the others for the
/// characters from U+0100 on, in byte order.
fn byte_alphabet() -> [char; 256] {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut alphabet = ['\0'; 256];
    let mut next = 256;
    for byte in 0..256u32 {
        alphabet[byte as usize] = match printable(byte) {
            true => char::from_u32(byte),
            false => {
                next += 1;
                char::from_u32(next - 1)
            }
        }
        .expect("below U+0200");
    }
    alphabet
}

/// The vocabulary by token: a token outside the byte alphabet (stored as plain UTF-8) is
/// spelled in it, byte by byte.
fn byte_vocabulary(tokens: &[&str]) -> serde_json::Map<String, Value> {
    let alphabet = byte_alphabet();
    let spelled = |token: &str| match token.chars().all(|c| alphabet.contains(&c)) {
        true => token.to_string(),
        false => token.bytes().map(|b| alphabet[b as usize]).collect(),
    };
    tokens.iter().enumerate().map(|(id, token)| (spelled(token), json!(id))).collect()
}

/// Control tokens as special tokens and user-defined ones in `vocab` as spelled there as plain
/// added tokens, each matched whole in the text; in a byte-level vocabulary, control tokens
/// spelled outside its alphabet are llama.cpp's mislabels and left out, as transformers does.
fn added_tokens(
    tokens: &[&str],
    types: &[u64],
    byte_level: bool,
    vocab: &serde_json::Map<String, Value>,
) -> Vec<Value> {
    let alphabet = byte_alphabet();
    let spelled = |token: &str| !byte_level || token.chars().all(|c| alphabet.contains(&c));
    let kinds = tokens.iter().zip(types).enumerate();
    kinds
        .filter_map(|(id, (token, kind))| match *kind {
            CONTROL if spelled(token) => Some((id, token, true)),
            USER_DEFINED if vocab.contains_key(*token) => Some((id, token, false)),
            _ => None,
        })
        .map(|(id, token, special)| {
            json!({"id": id, "content": token, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": special})
        })
        .collect()
}

/// The text alone, or `bos` (token, id) before it.
fn post_processor(bos: Option<(&str, u64)>) -> Value {
    let a = json!({"Sequence": {"id": "A", "type_id": 0}});
    let b = json!({"Sequence": {"id": "B", "type_id": 1}});
    match bos {
        None => {
            json!({"type": "TemplateProcessing", "single": [a], "pair": [a, b], "special_tokens": {}})
        }
        Some((token, id)) => {
            let special = |type_id| json!({"SpecialToken": {"id": token, "type_id": type_id}});
            json!({
                "type": "TemplateProcessing",
                "single": [special(0), a],
                "pair": [special(0), a, special(1), b],
                "special_tokens": {token: {"id": token, "ids": [id], "tokens": [token]}},
            })
        }
    }
}
