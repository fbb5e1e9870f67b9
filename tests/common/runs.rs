//! The training runs of the test binaries of swa-training and the facade: a folder for a test's
//! runs, the tiny model they train, and the logits that tell two trained models apart. Uses the
//! including binary's `to_vec` (tests/common/tensors.rs).

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor, TensorData};
use swa_models::layers::AttentionKind;
use swa_models::{Decoder, DecoderConfig};
use swa_training::train::TrainConfig;

/// An empty folder for test `name`'s runs, unique to this test process.
pub fn run_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-zoo-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The model the training tests train: 2 layers of sliding windows of 8 keys, `d_model` 16,
/// 2 heads, a byte vocabulary.
pub fn tiny_model() -> DecoderConfig {
    DecoderConfig::new(vec![AttentionKind::Sliding { window: 8 }])
        .with_d_model(16)
        .with_layers(2)
        .with_heads(2)
}

/// A run of [`tiny_model`]: `steps` steps of 2 sequences of 16, a checkpoint every 2 steps, the
/// last 2 kept.
pub fn tiny(steps: usize) -> TrainConfig {
    TrainConfig::new(tiny_model(), 16)
        .with_batch_size(2)
        .with_steps(steps)
        .with_checkpoint_every(2)
        .with_keep_checkpoints(2)
        .with_warmup_steps(1)
        .with_valid_batches(1)
}

/// The logits of `model` on 12 fixed tokens: what tells two trained models apart.
pub fn logits(model: &Decoder<NdArray>) -> Vec<f32> {
    let tokens: Vec<i64> = (0..12).map(|i| (i * 37 % 256) as i64).collect();
    let tokens = TensorData::new(tokens, [1, 12]);
    let tokens = Tensor::<NdArray, 2, Int>::from_data(tokens, &Default::default());
    crate::to_vec(model.forward(tokens).unwrap())
}
