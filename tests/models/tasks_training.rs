//! Training on the synthetic tasks and measuring their accuracy: MQAR recall accuracy, and
//! passkey retrieval per distance, beyond the window W and within the stack's reach (W − 1)·L.
//! These check the accuracy path end to end, not that a model of a few steps has learned.

use std::path::PathBuf;
use std::process::Command;

use burn::backend::{Autodiff, NdArray};
use burn::config::Config;
use swa_zoo::attention::layers::AttentionKind;
use swa_zoo::models::DecoderConfig;
use swa_zoo::training::corpus::Corpus;
use swa_zoo::training::synthetic::{SyntheticTask, accuracy, passkey_distances, receptive_field};
use swa_zoo::training::tasks::Passkey;
use swa_zoo::training::train::{TrainConfig, train};

type B = Autodiff<NdArray>;

fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-zoo-task-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A 4-layer model of window 32: reach (32 − 1)·4 = 124.
fn model() -> DecoderConfig {
    DecoderConfig::new(256, 16, 4, 2, 2, vec![AttentionKind::Sliding { window: 32 }])
}

fn on_task(task: SyntheticTask, seq_len: usize) -> TrainConfig {
    TrainConfig::new(model(), seq_len)
        .with_batch_size(2)
        .with_steps(2)
        .with_checkpoint_every(2)
        .with_warmup_steps(1)
        .with_valid_batches(1)
        .with_task(Some(task))
}

#[test]
fn a_model_trains_on_mqar_and_its_recall_accuracy_is_counted() {
    let dir = run_dir("mqar");
    let config = on_task(SyntheticTask::mqar(4), 32);
    let outcome = train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    for split in ["train", "valid"] {
        let logs: Vec<String> = std::fs::read_dir(dir.join(split).join("epoch-1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(logs.iter().any(|name| name.contains("Accuracy")), "{split} logs: {logs:?}");
    }
    let task = config.task.unwrap();
    let examples: Vec<_> = (0..6).map(|i| task.example(32, 9, i).unwrap()).collect();
    let score = accuracy(&outcome.model, &examples, 4, &Default::default()).unwrap();
    assert_eq!((score.scored, score.examples), (6 * 4, 6), "every queried key is scored");
    assert!(score.correct <= score.scored && score.exact <= score.examples);
    assert!((0.0..=1.0).contains(&score.token_accuracy()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn passkey_accuracy_is_measured_beyond_the_window_and_within_the_reach() {
    let dir = run_dir("passkey");
    let config = on_task(SyntheticTask::passkey(2), 96);
    let outcome = train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    assert_eq!(receptive_field(&config.model), Some((32, 4)));
    // W/2 = 16 and W = 32 are shorter than the question itself (55 bytes for 2 digits).
    let distances = passkey_distances(&config.model, 96, 2);
    assert_eq!(distances, [64, 124], "2W, beyond the window, and (W − 1)·L");
    for distance in distances {
        let len = 96.max(Passkey::shortest_seq_len(distance, 2));
        let task = Passkey::new(len, distance, 2).unwrap();
        let examples: Vec<_> = (0..3).map(|i| task.sample(5, i).unwrap()).collect();
        let score = accuracy(&outcome.model, &examples, 3, &Default::default()).unwrap();
        assert_eq!((score.scored, score.examples), (3 * 2, 3), "distance {distance}: the two digits are scored");
        assert!(score.correct <= score.scored);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `swa-zoo train --task passkey` then `swa-zoo eval`: the command line's accuracy table.
#[test]
fn the_command_line_trains_on_a_task_and_reports_accuracy_per_distance() {
    let dir = run_dir("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let model_file = dir.join("model.json");
    model().save(&model_file).unwrap();
    let run = dir.join("run");
    let swa_zoo = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_swa-zoo")).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "swa-zoo {args:?}:\n{text}");
        text
    };
    let (model_arg, run_arg) = (model_file.to_str().unwrap(), run.to_str().unwrap());
    let trained = swa_zoo(&[
        "train", "--backend", "ndarray", "--config", model_arg, "--task", "passkey", "--digits", "2", "--seq-len", "96",
        "--steps", "2", "--batch-size", "2", "--checkpoint-every", "2", "--out", run_arg,
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
