//! Training with segment memory (Transformer-XL §3.2; docs/semantics.md §10): streams of
//! consecutive segments per batch row, evaluation in streams, the memory saved with each
//! checkpoint, and a run resumed in the middle of its streams ending where the straight run ends.

use std::sync::Arc;

use burn::backend::{Autodiff, NdArray};
use burn::record::Recorder;
use swa_models::layers::{AttentionKind, LayerMemoryData};
use swa_models::records::MpkRecorder;
use swa_models::{Architecture, DecoderConfig};
use swa_training::checkpoint::last_checkpoint;
use swa_training::corpus::Corpus;
use swa_training::eval::{mean_loss, stream_loss};
use swa_training::language_model::LanguageModelRecord;
use swa_training::loader::{LoaderConfig, Sampling};
use swa_training::train::{TrainConfig, train};

use super::{killed_after, logits, run_dir, tiny};
use crate::{max_abs, to_vec};

type B = Autodiff<NdArray>;

/// Each row reads its own part of the tokens, segment after segment; training epochs continue
/// the streams, validation reads them from the start every time; a stream starts again once
/// its part is read.
#[test]
fn stream_batches_continue_each_row() {
    let tokens = Arc::new((0..100u32).collect::<Vec<_>>());
    let loader = |continuing| {
        LoaderConfig::new(8, 3)
            .with_steps(2)
            .with_sampling(Sampling::Streams { continuing })
            .init_text::<NdArray>(tokens.clone(), &Default::default())
            .unwrap()
    };
    // 99 tokens with targets over 3 rows: parts of 33 tokens, 4 segments of 8 in each.
    let first = |continuing, epoch, step| {
        let batch = loader(continuing).batch(epoch, step);
        let ids = to_vec(batch.inputs.float());
        ([ids[0], ids[8], ids[16]], batch.stream_start)
    };
    assert_eq!(first(true, 0, 0), ([0.0, 33.0, 66.0], Some(0)));
    assert_eq!(first(true, 0, 1), ([8.0, 41.0, 74.0], Some(8)));
    assert_eq!(first(true, 1, 1), ([24.0, 57.0, 90.0], Some(24)), "epoch 1 continues");
    assert_eq!(first(true, 2, 0), ([0.0, 33.0, 66.0], Some(0)), "after 4 segments, again");
    assert_eq!(first(false, 1, 1), ([8.0, 41.0, 74.0], Some(8)), "validation restarts");
    let targets = to_vec(loader(true).batch(0, 0).targets.float());
    assert_eq!(targets[..2], [1.0, 2.0]);
    let too_short = LoaderConfig::new(40, 3).with_sampling(Sampling::Streams { continuing: true });
    assert!(too_short.init_text::<NdArray>(tokens, &Default::default()).is_err());
}

/// Evaluating in segments of 8 with memory scores each position as one window of 16 does:
/// memory makes the windows exact across the segment boundary.
#[test]
fn stream_evaluation_matches_one_longer_window() {
    let device = Default::default();
    let kinds = vec![AttentionKind::MultiScale { windows: vec![3, 8] }, AttentionKind::Full];
    let model = DecoderConfig::new(kinds)
        .with_d_model(16)
        .with_heads(2)
        .with_layers(2)
        .init::<NdArray>(&device)
        .unwrap();
    let tokens = Corpus::embedded().valid();
    let streamed = stream_loss(&model, tokens.clone(), (8, 1, 2), 8, &device).unwrap();
    let whole = mean_loss(&model, (tokens, None), 16, 1, 1, &device).unwrap();
    assert!((streamed - whole).abs() < 1e-5, "{streamed} vs {whole}");
}

/// [`tiny`] with segment memory, on MSWA and Transformer-XL's relative positions.
fn with_memory(steps: usize) -> TrainConfig {
    let mut config = tiny(steps).with_segment_memory(true);
    config.model.attention = vec![AttentionKind::MultiScale { windows: vec![4, 12] }];
    config.model.architecture =
        Some(Architecture { relative_positions: true, ..Architecture::default() });
    config
}

/// A run with segment memory killed after its second checkpoint and resumed continues its
/// streams with the memory the checkpoint kept, and ends where the straight run ends.
#[test]
fn a_run_resumed_mid_stream_ends_where_the_straight_run_ends() {
    let corpus = Corpus::embedded();
    let device = Default::default();
    let straight = run_dir("memory-straight");
    let whole = train::<B>(&with_memory(6), &corpus, &straight, false, &device).unwrap();
    assert_eq!(last_checkpoint(&straight), Some(6));

    // The checkpoint keeps the training streams' memory after 4 steps of 16 tokens: each
    // layer's last 11 inputs (its widest window, 12, less one) of both rows.
    let path = straight.join("checkpoint").join("model-4.mpk");
    let record: LanguageModelRecord<NdArray> =
        Recorder::<NdArray>::load(&MpkRecorder, path, &device).unwrap();
    let memory = record.memory.and_then(|m| m.train).expect("the checkpoint keeps the memory");
    assert_eq!(memory.rows, 2);
    for layer in &memory.layers {
        let LayerMemoryData::Hidden { rows: Some((_, shape)), start, .. } = layer else {
            panic!("a windowed layer keeps its inputs: {layer:?}")
        };
        assert_eq!((*start, *shape), (64, [2, 11, 16]));
    }

    let interrupted = killed_after(&straight, "memory-interrupted", 4);
    let resumed = train::<B>(&with_memory(6), &corpus, &interrupted, true, &device).unwrap();
    let error = max_abs(&logits(&whole.model), &logits(&resumed.model));
    assert!(error < 1e-6, "the resumed run differs from the straight run by {error}");
    for dir in [straight, interrupted] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Segment memory with a synthetic task, or with LongNet segments that do not tile the
/// training length, is refused before any work, naming what is wrong.
#[test]
fn runs_that_cannot_keep_a_memory_are_refused() {
    let corpus = Corpus::embedded();
    let dir = run_dir("memory-bad");
    let message = |config: TrainConfig| {
        let error = train::<B>(&config, &corpus, &dir, false, &Default::default()).err();
        error.expect("refused").to_string()
    };
    let task = with_memory(2).with_task(Some(swa_training::synthetic::SyntheticTask::mqar(2)));
    assert!(message(task).contains("TrainConfig.segment_memory"));
    let mut longnet = with_memory(2);
    longnet.model.architecture = None;
    longnet.model.attention =
        vec![AttentionKind::LongNet { segments: vec![6, 16], dilations: vec![1, 2] }];
    let error = message(longnet);
    assert!(
        error.contains("layer 0") && error.contains("segment 6 (a LongNet branch's)"),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
