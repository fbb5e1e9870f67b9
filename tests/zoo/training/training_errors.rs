//! Error cases, each a one-line error naming the problem, with nothing saved overwritten: a
//! missing or empty corpus, an unknown preset or config field, a window larger than the training
//! length, a checkpoint of another config, a truncated checkpoint or model, a fresh run into a
//! folder holding one, and precisions or devices a backend does not have.

use std::path::Path;
use std::process::Command;

use super::run_dir;
use burn::backend::{Autodiff, NdArray};
use burn::config::Config;
use swa_zoo::models::DecoderConfig;
use swa_zoo::models::layers::AttentionKind;
use swa_zoo::training::corpus::Corpus;
use swa_zoo::training::train::{TrainConfig, train};

type B = Autodiff<NdArray>;

fn tiny(d_model: usize) -> TrainConfig {
    let model = DecoderConfig::new(vec![AttentionKind::Sliding { window: 8 }])
        .with_d_model(d_model)
        .with_layers(2)
        .with_heads(2);
    TrainConfig::new(model, 16)
        .with_batch_size(2)
        .with_steps(2)
        .with_checkpoint_every(2)
        .with_warmup_steps(1)
        .with_valid_batches(1)
}

/// `swa-zoo args…` must fail with one line on stderr containing every one of `expected`.
fn fails_with(args: &[&str], expected: &[&str]) {
    let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "swa-zoo {args:?} succeeded");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "swa-zoo {args:?}: `{part}` not in {stderr}");
    }
}

fn bytes_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn corpus_preset_and_config_errors_name_the_problem() {
    let dir = run_dir("error-cli");
    let out = dir.join("run");
    let out = out.to_str().unwrap();
    let missing = dir.join("missing.txt");
    fails_with(
        &["train", "--backend", "ndarray", "--corpus", missing.to_str().unwrap(), "--out", out],
        &["cannot read corpus", "missing.txt"],
    );
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    fails_with(
        &["train", "--backend", "ndarray", "--corpus", empty.to_str().unwrap(), "--out", out],
        &["empty.txt", "too small"],
    );
    fails_with(
        &["train", "--backend", "ndarray", "--preset", "no-such-preset", "--out", out],
        &["no preset named `no-such-preset`"],
    );
    let config = dir.join("model.json");
    let text =
        tiny(16).model.to_string().replace("\"vocab_size\"", "\"vocab_sise\": 3, \"vocab_size\"");
    std::fs::write(&config, text).unwrap();
    fails_with(
        &["train", "--backend", "ndarray", "--config", config.to_str().unwrap(), "--out", out],
        &["model.json", "unknown field `vocab_sise`"],
    );
    fails_with(
        &["train", "--backend", "ndarray", "--seq-len", "2", "--out", out],
        &["window of", "larger than the training length 2"],
    );
    assert!(!Path::new(out).exists(), "nothing was written");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn precision_and_devices_a_backend_lacks_are_errors() {
    fails_with(
        &["train", "--backend", "ndarray", "--precision", "f16"],
        &["--precision f16", "ndarray computes in f32 only"],
    );
    fails_with(&["bench", "--backend", "ndarray", "--precision", "bf16"], &["--precision bf16"]);
    fails_with(
        &["train", "--backend", "ndarray", "--devices", "0,1"],
        &["one device", "--devices needs --backend wgpu or cuda"],
    );
}

#[test]
fn a_window_larger_than_the_training_length_is_an_error() {
    let dir = run_dir("window");
    let config = TrainConfig { seq_len: 4, ..tiny(16) };
    let error = train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains(
            "TrainConfig.seq_len: layer 0's window of 8 keys is larger than the training length 4"
        ),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_fresh_run_never_overwrites_a_saved_run() {
    let dir = run_dir("fresh");
    train::<B>(&tiny(16), &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    let before = (bytes_of(&dir), bytes_of(&dir.join("checkpoint")));
    // A second later: a refused run that took the lock would leave its own start time in
    // run.lock (to the second), which the comparison below would see.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let error = train::<B>(&tiny(16), &Corpus::embedded(), &dir, false, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("already holds a training run") && error.contains("--resume"),
        "{error}"
    );
    assert_eq!((bytes_of(&dir), bytes_of(&dir.join("checkpoint"))), before);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn resuming_from_a_foreign_or_truncated_checkpoint_is_an_error_and_keeps_the_files() {
    let dir = run_dir("resume");
    train::<B>(&tiny(16), &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    let before = bytes_of(&dir.join("checkpoint"));
    // The run's folder now says d_model 32, but its checkpoint holds d_model 16 weights.
    let error = train::<B>(&tiny(32), &Corpus::embedded(), &dir, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("--resume") && error.contains("model-2.mpk") && error.contains("shape"),
        "{error}"
    );
    let model = dir.join("checkpoint").join("model-2.mpk");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let error = train::<B>(&tiny(16), &Corpus::embedded(), &dir, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("--resume") && error.contains("model-2.mpk"), "{error}");
    assert_eq!(
        std::fs::read(&model).unwrap().len(),
        bytes.len() / 2,
        "the truncated file is left as it was"
    );
    let after = bytes_of(&dir.join("checkpoint"));
    assert_eq!(
        after.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        before.iter().map(|(name, _)| name).collect::<Vec<_>>()
    );
    assert_eq!(
        TrainConfig::load(dir.join("train.json")).unwrap().model.d_model,
        16,
        "train.json is not rewritten by a failed resume"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_truncated_model_names_its_run_and_not_burns_format_note() {
    let dir = run_dir("truncated-model");
    train::<B>(&tiny(16), &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    let model = dir.join("model.mpk");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.to_str().unwrap();
    let args = ["generate", "--backend", "ndarray", "--out", out, "--tokens", "4"];
    fails_with(&args, &["model of the run in", out, "model.mpk", "truncated or corrupt"]);
    let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("0.14"), "Burn's note on old record formats: {stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A build without the `mpi` feature refuses `train --mpi` in one line naming the feature, and
/// `--devices` with `--mpi` (one device per process) in one line naming the flag.
#[cfg(not(feature = "mpi"))]
#[test]
fn train_with_mpi_needs_the_mpi_build() {
    let dir = run_dir("no-mpi");
    let out = dir.join("run");
    let args = ["train", "--mpi", "--steps", "1", "--out", out.to_str().unwrap()];
    fails_with(&args, &["rank 0", "this build has no MPI", "`mpi` feature"]);
    let args = ["train", "--mpi", "--devices", "0,1", "--out", out.to_str().unwrap()];
    fails_with(&args, &["--devices", "one device"]);
    assert!(!out.join("train.json").exists(), "a refused run wrote its configuration");
    let _ = std::fs::remove_dir_all(dir);
}
