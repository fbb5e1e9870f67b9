//! The commands that read Hugging Face checkpoints, run on every fixture of
//! `tests/fixtures/hf` as a user runs them: generate, the window-inference grid, attention
//! maps, and zero-shot multiple choice against what transformers computed.

use std::path::{Path, PathBuf};

use burn::backend::NdArray;
use clap::Parser;
use swa_zoo::cli::{Cli, eval_choice};

const FAMILIES: [&str; 5] = ["mistral", "qwen2", "gemma2", "gemma3", "llama"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf")
}

/// Runs `swa-zoo` with `args` on ndarray.
fn swa_zoo(args: &[&str]) {
    let argv = ["swa-zoo"].iter().chain(args).chain(&["--backend", "ndarray"]);
    swa_zoo::cli::run(Cli::parse_from(argv)).unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

#[test]
fn every_fixture_generates_maps_attention_and_evaluates_under_window_inference() {
    for family in FAMILIES {
        let dir = fixtures().join(family);
        let dir = dir.to_str().unwrap();
        swa_zoo(&["generate", "--hf", dir, "--prompt", "And God said", "--tokens", "8"]);
        let out =
            std::env::temp_dir().join(format!("swa-zoo-hf-cli-{family}-{}", std::process::id()));
        let to = out.to_str().unwrap();
        swa_zoo(&["attention-map", "--hf", dir, "--layers", "0,1", "--heads", "0,3", "--to", to]);
        for file in ["layer0_head0.png", "layer1_head3.png"] {
            let png = std::fs::read(out.join(file)).unwrap();
            assert_eq!(&png[1..4], b"PNG", "{family}: {file}");
        }
        let corpus = fixtures().join("corpus.txt");
        let corpus = corpus.to_str().unwrap();
        let grid = ["--lengths", "16,32", "--windows", "4,8", "--sequences", "2", "--to", to];
        swa_zoo(&[&["eval", "--hf", dir, "--corpus", corpus][..], &grid[..]].concat());
        swa_zoo(
            &[&["eval", "--hf", dir, "--corpus", corpus, "--sinks", "2"][..], &grid[..]].concat(),
        );
        let csv = std::fs::read_to_string(out.join("eval.csv")).unwrap();
        assert_eq!(csv.lines().count(), 1 + 2 * 2, "{family}: {csv}");
        assert!(out.join("eval_grid.svg").is_file(), "{family}");
        std::fs::remove_dir_all(&out).unwrap();
    }
}

/// The log-likelihoods and accuracies transformers computed for the questions of
/// `choice/tasks.jsonl` with the llama fixture (`choice/expected.json`), by hand: acc 1 (each
/// answer has the largest sum), acc_norm ½ (per character, questions 2 and 3 pick another).
#[test]
fn multiple_choice_scores_as_transformers_does() {
    let choice = fixtures().join("choice");
    let results = eval_choice::evaluate::<NdArray>(
        &fixtures().join("llama"),
        &choice.join("tasks.jsonl"),
        &Default::default(),
    )
    .unwrap();
    let text = std::fs::read_to_string(choice.join("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let want = expected["log_likelihoods"].as_array().unwrap();
    for (got, want) in results.log_likelihoods.iter().zip(want) {
        for (g, w) in got.iter().zip(want.as_array().unwrap()) {
            let w = w.as_f64().unwrap();
            assert!((g - w).abs() < 1e-3, "log-likelihood {g} against transformers' {w}");
        }
    }
    assert_eq!(results.accuracy.acc, expected["acc"].as_f64().unwrap());
    assert_eq!(results.accuracy.acc_norm, expected["acc_norm"].as_f64().unwrap());
    assert_eq!((results.accuracy.acc, results.accuracy.acc_norm), (1.0, 0.5));
}
