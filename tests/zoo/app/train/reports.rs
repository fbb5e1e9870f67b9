//! What `swa-zoo train` and `swa-zoo eval` report: the accuracy per distance of a model trained
//! on a synthetic task, and validation bits in the corpus's unit (per byte, per word).

use std::process::Command;

use burn::config::Config;
use swa_zoo::models::DecoderConfig;
use swa_zoo::models::layers::AttentionKind;

use crate::{run_dir, tiny_model};

/// `swa-zoo train --task passkey` then `swa-zoo eval`: the command line's accuracy table.
#[test]
fn the_command_line_trains_on_a_task_and_reports_accuracy_per_distance() {
    let dir = run_dir("task-cli");
    std::fs::create_dir_all(&dir).unwrap();
    let model_file = dir.join("model.json");
    // 4 layers of window 32: reach (32 − 1)·4 = 124.
    let model = DecoderConfig::new(vec![AttentionKind::Sliding { window: 32 }]);
    model.with_d_model(16).with_heads(2).save(&model_file).unwrap();
    let run = dir.join("run");
    let swa_zoo = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "swa-zoo {args:?}:\n{text}");
        text
    };
    let (model_arg, run_arg) = (model_file.to_str().unwrap(), run.to_str().unwrap());
    let trained = swa_zoo(&[
        "train",
        "--backend",
        "ndarray",
        "--config",
        model_arg,
        "--task",
        "passkey",
        "--digits",
        "2",
        "--seq-len",
        "96",
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--checkpoint-every",
        "2",
        "--out",
        run_arg,
    ]);
    assert!(trained.contains("accuracy on 64 fresh Passkey"), "{trained}");
    let evaluated = swa_zoo(&["eval", "--backend", "ndarray", "--out", run_arg, "--examples", "2"]);
    assert!(evaluated.contains("reach (W − 1)·L = 124"), "{evaluated}");
    for distance in ["distance     64", "distance    124"] {
        assert!(evaluated.contains(distance), "{evaluated}");
    }
    let csv = std::fs::read_to_string(run.join("eval_task.csv")).unwrap();
    assert_eq!(csv.lines().next(), Some("window,length,distance,accuracy,exact"));
    assert_eq!(csv.lines().count(), 3);
    let _ = std::fs::remove_dir_all(dir);
}

/// `swa-zoo train` reports validation bits per byte on text and per word on a word-level
/// corpus, before and after training, as its metrics do.
#[test]
fn the_command_line_reports_bits_in_the_corpus_unit() {
    let dir = run_dir("units");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("model.json");
    tiny_model().save(&config).unwrap();
    let words = dir.join("words.txt");
    let text: String = (0..400).map(|i| format!("the cat sat on mat {}\n", i % 40)).collect();
    std::fs::write(&words, text).unwrap();
    let train = |name: &str, corpus: &[&str]| {
        let out = dir.join(name);
        let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo"))
            .args(["train", "--backend", "ndarray", "--config", config.to_str().unwrap()])
            .args(["--seq-len", "16", "--steps", "2", "--batch-size", "2"])
            .args(["--checkpoint-every", "2", "--out", out.to_str().unwrap()])
            .args(corpus)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
        stdout
    };
    let bytes = train("bytes", &[]);
    assert_eq!(bytes.matches(" bits per byte").count(), 2, "{bytes}");
    let words = train("words", &["--corpus", words.to_str().unwrap(), "--words", "1"]);
    assert_eq!(words.matches(" bits per word").count(), 2, "{words}");
    assert!(!(bytes + &words).contains("per token"));
    let _ = std::fs::remove_dir_all(dir);
}
