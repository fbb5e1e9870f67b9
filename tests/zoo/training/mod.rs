//! `swa-training`: runs with Burn's Learner (exact resume, checkpoints, evaluation), their
//! errors, several devices and half precision, the synthetic tasks, mixed precision's
//! mechanics, and the CubeCL kernels inside training.

mod checkpoints;
mod full_disk;
mod kernel_training;
mod kill;
mod lock;
mod memory;
mod mixed_precision;
mod run;
mod stop;
mod tasks_training;
mod training_devices;
mod training_errors;

/// An empty folder for test `name`'s runs, unique to this test process.
fn run_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("swa-zoo-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The run in `from` as a kill after the checkpoint of step `step` leaves it, in the fresh folder of test
/// `name`: its `train.json`, and that checkpoint's records, each with the sidecar (size and
/// checksum) that makes the checkpoint complete.
fn killed_after(from: &std::path::Path, name: &str, step: usize) -> std::path::PathBuf {
    let to = run_dir(name);
    std::fs::create_dir_all(to.join("checkpoint")).unwrap();
    std::fs::copy(from.join("train.json"), to.join("train.json")).unwrap();
    for part in ["model", "optim", "scheduler"] {
        for file in [format!("{part}-{step}.mpk"), format!("{part}-{step}.mpk.check")] {
            let source = from.join("checkpoint").join(&file);
            std::fs::copy(source, to.join("checkpoint").join(&file)).unwrap();
        }
    }
    to
}

/// The model the training tests train: 2 layers of sliding windows of 8 keys, `d_model` 16,
/// 2 heads, a byte vocabulary.
fn tiny_model() -> swa_zoo::models::DecoderConfig {
    use swa_zoo::models::layers::AttentionKind;
    swa_zoo::models::DecoderConfig::new(vec![AttentionKind::Sliding { window: 8 }])
        .with_d_model(16)
        .with_layers(2)
        .with_heads(2)
}

/// A run of [`tiny_model`]: `steps` steps of 2 sequences of 16, a checkpoint every 2 steps, the
/// last 2 kept.
fn tiny(steps: usize) -> swa_zoo::training::train::TrainConfig {
    swa_zoo::training::train::TrainConfig::new(tiny_model(), 16)
        .with_batch_size(2)
        .with_steps(steps)
        .with_checkpoint_every(2)
        .with_keep_checkpoints(2)
        .with_warmup_steps(1)
        .with_valid_batches(1)
}

/// The logits of `model` on 12 fixed tokens: what tells two trained models apart.
fn logits(model: &swa_zoo::models::Decoder<burn::backend::NdArray>) -> Vec<f32> {
    use burn::tensor::{Int, Tensor, TensorData};
    let tokens: Vec<i64> = (0..12).map(|i| (i * 37 % 256) as i64).collect();
    let tokens = TensorData::new(tokens, [1, 12]);
    let tokens = Tensor::<burn::backend::NdArray, 2, Int>::from_data(tokens, &Default::default());
    crate::to_vec(model.forward(tokens).unwrap())
}

/// The logits of the [`tiny_model`] a command-line run saved in `dir/out` (its `model.mpk`).
fn saved_logits(dir: &std::path::Path, out: &str) -> Vec<f32> {
    let path = dir.join(out).join("model.mpk");
    let device = Default::default();
    let load = swa_zoo::models::weights::load_record::<burn::backend::NdArray>;
    logits(&load(&tiny_model(), &path, &device).unwrap())
}
