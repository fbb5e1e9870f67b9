//! Training: exact resume from a checkpoint, checkpoint rotation, the schedule, the loader, and
//! evaluation (windows, and decoded token by token).

use std::sync::Arc;

use burn::backend::{Autodiff, NdArray};
use burn::data::dataloader::DataLoader;
use swa_models::DecoderConfig;
use swa_models::layers::AttentionKind;
use swa_training::checkpoint::last_checkpoint;
use swa_training::corpus::Corpus;
use swa_training::error::TrainingError;
use swa_training::eval::with_eval_window;
use swa_training::loader::{LoaderConfig, Sampling, WindowLoader};
use swa_training::schedule::WarmupCosine;
use swa_training::train::{TrainConfig, train};

use super::{killed_after, logits, run_dir, tiny};
use crate::{max_abs, to_vec};

type B = Autodiff<NdArray>;

/// A run killed after its first checkpoint and resumed ends where the uninterrupted run ends:
/// same steps, same data, same optimizer and schedule state, and its logs are numbered by the
/// run's epochs.
#[test]
fn a_resumed_run_ends_where_the_uninterrupted_run_ends() {
    let corpus = Corpus::embedded();
    let device = Default::default();
    let straight = run_dir("straight");
    let config = tiny(6).with_keep_checkpoints(3);
    let whole = train::<B>(&config, &corpus, &straight, false, &device).unwrap();
    assert_eq!(last_checkpoint(&straight), Some(6));
    let kept = std::fs::read_dir(straight.join("checkpoint"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("model-") && name.ends_with(".mpk"));
    assert_eq!(kept.count(), 3, "only the last three checkpoints are kept");

    // Kill the run after its first checkpoint: a copy of the folder with that one alone.
    let interrupted = killed_after(&straight, "interrupted", 2);
    assert_eq!(last_checkpoint(&interrupted), Some(2));
    let resumed = train::<B>(&config, &corpus, &interrupted, true, &device).unwrap();
    let mut epochs: Vec<_> = std::fs::read_dir(interrupted.join("train"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    epochs.sort();
    let numbered = "the resumed epochs' logs are numbered as in the straight run";
    assert_eq!(epochs, ["epoch-2", "epoch-3"], "{numbered}");
    let error = max_abs(&logits(&whole.model), &logits(&resumed.model));
    assert!(error < 1e-5, "resumed run differs from the straight run by {error}");
    for dir in [straight, interrupted] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `--resume` of a run killed before it wrote anything starts it afresh.
#[test]
fn resume_without_a_checkpoint_starts_afresh() {
    let dir = run_dir("empty");
    train::<B>(&tiny(2), &Corpus::embedded(), &dir, true, &Default::default()).unwrap();
    assert_eq!(last_checkpoint(&dir), Some(2));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_training_settings_name_the_field() {
    let corpus = Corpus::embedded();
    let dir = run_dir("bad");
    let message = |config: TrainConfig| {
        train::<B>(&config, &corpus, &dir, false, &Default::default()).err().unwrap().to_string()
    };
    assert!(message(tiny(0)).contains("TrainConfig.steps"));
    assert!(message(TrainConfig { seq_len: 0, ..tiny(2) }).contains("TrainConfig.seq_len"));
    let mut small_vocab = tiny(2);
    small_vocab.model.vocab_size = 10;
    assert!(message(small_vocab).contains("vocab_size"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn warmup_then_cosine() {
    let schedule = WarmupCosine::new(1.0, 0.1, 10, 110);
    assert!((schedule.rate(5) - 0.5).abs() < 1e-12);
    assert!((schedule.rate(10) - 1.0).abs() < 1e-12);
    assert!((schedule.rate(60) - 0.55).abs() < 1e-12);
    assert!((schedule.rate(110) - 0.1).abs() < 1e-12);
    assert!((schedule.rate(500) - 0.1).abs() < 1e-12);
}

#[test]
fn batches_depend_only_on_seed_epoch_and_step() {
    let tokens = Arc::new((0..1000u32).map(|t| t % 256).collect::<Vec<_>>());
    let loader = |seed| {
        LoaderConfig::new(8, 3)
            .with_steps(5)
            .with_sampling(Sampling::Random { seed })
            .init_text::<NdArray>(tokens.clone(), &Default::default())
            .unwrap()
    };
    let ids = |l: &WindowLoader<NdArray>, epoch, step| to_vec(l.batch(epoch, step).inputs.float());
    assert_eq!(ids(&loader(1), 2, 3), ids(&loader(1), 2, 3));
    assert_ne!(ids(&loader(1), 2, 3), ids(&loader(1), 1, 3));
    assert_ne!(ids(&loader(1), 2, 3), ids(&loader(2), 2, 3));
    let batch = loader(1).batch(0, 0);
    let (inputs, targets) = (to_vec(batch.inputs.float()), to_vec(batch.targets.float()));
    assert_eq!(inputs[1..8], targets[..7], "targets are the inputs shifted by one");
    assert!(
        LoaderConfig::new(8, 1)
            .init_text::<NdArray>(Arc::new(vec![1, 2]), &Default::default())
            .is_err()
    );
}

/// With a BOS, each window is the BOS and `len` tokens of the text, all scored; sequential
/// windows score every token of the text exactly once; streams refuse a BOS.
#[test]
fn windows_after_a_bos_score_every_token_of_the_text_once() {
    let tokens = Arc::new((10..30u32).collect::<Vec<_>>());
    let loader = LoaderConfig::new(4, 2).with_steps(10).with_bos(Some(1));
    let loader = loader.init_text::<NdArray>(tokens.clone(), &Default::default()).unwrap();
    assert_eq!(loader.num_items(), 4, "20 tokens: 5 windows of 4, cut to whole batches of 2");
    let batch = loader.batch(0, 1);
    let inputs = to_vec(batch.inputs.float());
    let targets = to_vec(batch.targets.float());
    assert_eq!(inputs, [1., 18., 19., 20., 1., 22., 23., 24.]);
    assert_eq!(targets, [18., 19., 20., 21., 22., 23., 24., 25.]);
    let exact = LoaderConfig::new(20, 1).with_bos(Some(1));
    assert!(exact.init_text::<NdArray>(tokens.clone(), &Default::default()).is_ok());
    let streams = LoaderConfig::new(4, 1)
        .with_bos(Some(1))
        .with_sampling(Sampling::Streams { continuing: false })
        .init_text::<NdArray>(tokens, &Default::default());
    assert!(matches!(streams.err(), Some(TrainingError::BosInStreams)));
}

#[test]
fn evaluation_windows_replace_local_windows_only() {
    let config = DecoderConfig::new(vec![AttentionKind::Full, AttentionKind::swat(64)])
        .with_d_model(16)
        .with_layers(2)
        .with_heads(2);
    let windowed = with_eval_window(&config, 16, 0).unwrap();
    assert_eq!(
        windowed.attention,
        vec![AttentionKind::Sliding { window: 16 }, AttentionKind::swat(16)]
    );
    let sinks = with_eval_window(
        &DecoderConfig { attention: vec![AttentionKind::Full], ..config.clone() },
        16,
        4,
    )
    .unwrap();
    assert_eq!(sinks.attention, vec![AttentionKind::Sinks { sinks: 4, window: 16 }; 2]);
    let linear =
        DecoderConfig { attention: vec![AttentionKind::Linear { feature_dim: 4 }], ..config };
    assert!(with_eval_window(&linear, 16, 0).unwrap_err().to_string().contains("layer 0"));
}

/// Decoding token by token with absolute positions scores exactly what one batch of the
/// parallel evaluation scores; StreamingLLM's slot positions change a sink model's score only
/// once the sequence outgrows sinks + window.
#[test]
fn decoded_loss_matches_the_parallel_evaluation() {
    use swa_models::layers::CachePositions;
    use swa_training::eval::{decoded_loss, mean_loss};
    let device = Default::default();
    let corpus = Corpus::embedded();
    let config = DecoderConfig::new(vec![AttentionKind::Sinks { sinks: 2, window: 4 }])
        .with_d_model(16)
        .with_layers(2)
        .with_heads(2);
    let model = config.init::<NdArray>(&device).unwrap();
    let parallel = mean_loss(&model, (corpus.valid(), None), 12, 3, 1, &device).unwrap();
    let decoded =
        decoded_loss(&model, corpus.valid(), 12, 3, CachePositions::Absolute, &device).unwrap();
    assert!((parallel - decoded).abs() < 1e-5, "parallel {parallel}, decoded {decoded}");
    let short = |positions| decoded_loss(&model, corpus.valid(), 6, 3, positions, &device).unwrap();
    assert!((short(CachePositions::Absolute) - short(CachePositions::Streaming)).abs() < 1e-5);
    let streaming =
        decoded_loss(&model, corpus.valid(), 12, 3, CachePositions::Streaming, &device).unwrap();
    assert!(
        (streaming - decoded).abs() > 1e-4,
        "slot positions should change the score past sinks + window"
    );
}
