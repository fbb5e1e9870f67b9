//! Training on the synthetic tasks and measuring their accuracy: MQAR recall accuracy, and
//! passkey retrieval per distance, beyond the window W and within the stack's reach (W − 1)·L;
//! the majority task's layout, its best accuracy from part of the sequence, and the positions a
//! Longformer encoder's CLS token can read. These check the accuracy path end to end, not that
//! a model of a few steps has learned.

use super::run_dir;
use burn::backend::{Autodiff, NdArray};
use swa_models::layers::AttentionKind;
use swa_models::{DecoderConfig, Preset, PresetSize};
use swa_training::corpus::Corpus;
use swa_training::synthetic::{
    SyntheticTask, influence, model_accuracy, passkey_distances, receptive_field,
};
use swa_training::tasks::{MAJORITY_CLS, MAJORITY_MARKERS, Majority, Passkey};
use swa_training::train::{TrainConfig, train};

type B = Autodiff<NdArray>;

/// A 4-layer model of window 32: reach (32 − 1)·4 = 124.
fn model() -> DecoderConfig {
    DecoderConfig::new(vec![AttentionKind::Sliding { window: 32 }]).with_d_model(16).with_heads(2)
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
    let outcome =
        train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    for split in ["train", "valid"] {
        let logs: Vec<String> = std::fs::read_dir(dir.join(split).join("epoch-1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(logs.iter().any(|name| name.contains("Accuracy")), "{split} logs: {logs:?}");
    }
    let task = config.task.unwrap();
    let examples: Vec<_> = (0..6).map(|i| task.example(32, 9, i).unwrap()).collect();
    let score = model_accuracy(&outcome.model, &examples, 4, &Default::default()).unwrap();
    assert_eq!((score.scored, score.examples), (6 * 4, 6), "every queried key is scored");
    assert!(score.correct <= score.scored && score.exact <= score.examples);
    assert!((0.0..=1.0).contains(&score.token_accuracy()));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn passkey_accuracy_is_measured_beyond_the_window_and_within_the_reach() {
    let dir = run_dir("passkey");
    let config = on_task(SyntheticTask::passkey(2), 96);
    let outcome =
        train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    assert_eq!(receptive_field(&config.model), Some((32, 4)));
    // W/2 = 16 and W = 32 are shorter than the question itself (55 bytes for 2 digits).
    let distances = passkey_distances(&config.model, 96, 2);
    assert_eq!(distances, [64, 124], "2W, beyond the window, and (W − 1)·L");
    for distance in distances {
        let len = 96.max(Passkey::shortest_seq_len(distance, 2));
        let task = Passkey::new(len, distance, 2).unwrap();
        let examples: Vec<_> = (0..3).map(|i| task.sample(5, i).unwrap()).collect();
        let score = model_accuracy(&outcome.model, &examples, 3, &Default::default()).unwrap();
        assert_eq!(
            (score.scored, score.examples),
            (3 * 2, 3),
            "distance {distance}: the two digits are scored"
        );
        assert!(score.correct <= score.scored);
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn majority_examples_ask_the_majority_marker_at_the_cls_token_only() {
    let task = Majority::new(64, 5, 10).unwrap();
    assert_eq!(task.sample(3, 1).unwrap(), task.sample(3, 1).unwrap());
    assert_ne!(task.sample(3, 1).unwrap(), task.sample(3, 2).unwrap());
    let mut answers = [0, 0];
    for index in 0..200 {
        let ex = task.sample(3, index).unwrap();
        assert_eq!((ex.tokens.len(), ex.tokens[0]), (64, MAJORITY_CLS));
        let count = |m: u32| ex.tokens.iter().filter(|&&t| t == m).count();
        let [a, b] = MAJORITY_MARKERS.map(count);
        assert_eq!(a + b, 5, "five markers");
        assert!(
            ex.tokens[1..].iter().all(|&t| MAJORITY_MARKERS.contains(&t) || (3..13).contains(&t)),
            "markers or the 10 fillers"
        );
        let answer = if a > b { MAJORITY_MARKERS[0] } else { MAJORITY_MARKERS[1] };
        assert_eq!(ex.targets[0], Some(answer));
        assert!(ex.targets[1..].iter().all(Option::is_none), "only CLS is scored");
        answers[usize::from(answer == MAJORITY_MARKERS[1])] += 1;
    }
    assert!(answers.iter().all(|&n| n > 70), "both classes are common: {answers:?}");
}

#[test]
fn majority_settings_that_cannot_work_are_errors() {
    assert!(Majority::new(64, 4, 10).unwrap_err().to_string().contains("tie"));
    assert!(Majority::new(5, 5, 10).unwrap_err().to_string().contains("seq_len"));
    assert!(Majority::new(64, 5, 0).unwrap_err().to_string().contains("filler_vocab"));
    assert!(Majority::new(64, 5, 254).unwrap_err().to_string().contains("filler_vocab"));
    assert!(Majority::new(6, 5, 253).is_ok());
    assert!(SyntheticTask::majority(3).validate(3).is_err());
}

#[test]
fn the_best_accuracy_from_part_of_a_sequence_is_the_majority_of_the_markers_seen() {
    let task = Majority::new(32, 3, 4).unwrap();
    let ex = task.sample(0, 0).unwrap();
    let markers: Vec<usize> =
        (0..32).filter(|&t| MAJORITY_MARKERS.contains(&ex.tokens[t])).collect();
    let seeing =
        |positions: &[usize]| (0..32).map(|t| positions.contains(&t)).collect::<Vec<bool>>();
    assert_eq!(Majority::best_accuracy(&ex, &[true; 32]), 1.0);
    assert_eq!(Majority::best_accuracy(&ex, &[true]), 0.5, "no marker seen: a coin toss");
    let agrees = |t: usize| Some(ex.tokens[t]) == ex.targets[0];
    let single = Majority::best_accuracy(&ex, &seeing(&markers[..1]));
    assert_eq!(single, if agrees(markers[0]) { 1.0 } else { 0.0 });
    let (first, second) = (ex.tokens[markers[0]], ex.tokens[markers[1]]);
    let pair = Majority::best_accuracy(&ex, &seeing(&markers[..2]));
    assert_eq!(
        pair,
        if first != second {
            0.5
        } else if agrees(markers[0]) {
            1.0
        } else {
            0.0
        }
    );
}

/// The tiny Longformer encoder: 2 layers of one-sided window 8, dilations 1 1 2 2, CLS global.
#[test]
fn influence_is_the_receptive_field_of_cls_with_windows_dilation_and_globals() {
    let preset = Preset::longformer(false, PresetSize::Tiny, 256).config;
    let with = |dilations: Vec<usize>, globals: Vec<usize>| DecoderConfig {
        attention: vec![AttentionKind::Longformer { window: 8, dilations, globals, causal: false }],
        ..preset.clone()
    };
    let read = |config: &DecoderConfig| influence(config, 128, 0).unwrap();
    assert!(read(&preset).iter().all(|&r| r), "a global CLS reads everything");
    let plain = read(&with(vec![1; 4], vec![]));
    assert_eq!(plain.iter().rposition(|&r| r), Some(16), "L·w = 16");
    assert!(plain[..=16].iter().all(|&r| r));
    let dilated = read(&with(vec![1, 1, 2, 4], vec![]));
    assert_eq!(dilated.iter().rposition(|&r| r), Some(64), "two layers of 8 steps of 4");
    assert!(dilated[..=40].iter().all(|&r| r), "dense up to 4·8 + 8");
    let sparse: Vec<usize> = (41..128).filter(|&t| dilated[t]).collect();
    assert_eq!(
        sparse,
        [42, 44, 46, 48, 52, 56, 60, 64],
        "beyond 40, the gaps of the dilated heads: steps of 2 from 32, of 4 from 32"
    );
    let causal = DecoderConfig {
        attention: vec![AttentionKind::Longformer {
            window: 8,
            dilations: vec![1; 4],
            globals: vec![],
            causal: true,
        }],
        ..preset.clone()
    };
    let last = influence(&causal, 128, 100).unwrap();
    assert_eq!(
        (last.iter().position(|&r| r), last.iter().rposition(|&r| r)),
        (Some(84), Some(100)),
        "a decoder reads back only"
    );
    assert!(influence(&preset, 8, 8).is_err());
}

#[test]
fn a_longformer_encoder_trains_on_the_majority_task_and_is_scored_at_cls() {
    let dir = run_dir("majority");
    let preset = Preset::longformer(false, PresetSize::Tiny, 256);
    let task = SyntheticTask::majority(5);
    let config = TrainConfig::new(preset.config, 64)
        .with_batch_size(2)
        .with_steps(2)
        .with_checkpoint_every(2)
        .with_warmup_steps(1)
        .with_valid_batches(1)
        .with_task(Some(task.clone()));
    let outcome =
        train::<B>(&config, &Corpus::embedded(), &dir, false, &Default::default()).unwrap();
    let examples: Vec<_> = (0..5).map(|i| task.example(64, 9, i).unwrap()).collect();
    let score = model_accuracy(&outcome.model, &examples, 4, &Default::default()).unwrap();
    assert_eq!((score.scored, score.examples), (5, 5), "one answer per example, at CLS");
    assert_eq!(score.correct, score.exact);
    let _ = std::fs::remove_dir_all(dir);
}
