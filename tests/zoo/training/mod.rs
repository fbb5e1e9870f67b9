//! `swa-training`: runs with Burn's Learner (exact resume, checkpoints, evaluation), their
//! errors, several devices and half precision, the synthetic tasks, mixed precision's
//! mechanics, and the CubeCL kernels inside training.

mod checkpoints;
mod distributed;
mod kernel_training;
mod kill;
mod mixed_precision;
mod run;
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
