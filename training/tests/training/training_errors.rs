//! Error cases, each an error naming the problem, with nothing saved overwritten: a window
//! larger than the training length, a checkpoint of another config, a truncated checkpoint, and
//! a fresh run into a folder holding one.

use std::path::Path;

use super::run_dir;
use burn::backend::{Autodiff, NdArray};
use burn::config::Config;
use swa_models::DecoderConfig;
use swa_models::layers::AttentionKind;
use swa_training::corpus::Corpus;
use swa_training::train::{TrainConfig, train};

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
