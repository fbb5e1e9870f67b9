//! Tests of `swa-training`: runs with Burn's Learner (exact resume, checkpoints, evaluation),
//! their errors, several devices and half precision, the synthetic tasks, mixed precision's
//! mechanics, the CubeCL kernels inside training, and the kernel launches of a decoding and a
//! training step. One binary, since every test binary links Burn; `swa-zoo train` itself (kills,
//! stops, the run lock, a full disk, its errors) is tested in the facade's `zoo` binary.

#[path = "../../../tests/common/decoding.rs"]
pub mod decoding;
#[path = "../../../tests/common/runs.rs"]
pub mod runs;
#[path = "../../../tests/common/tensors.rs"]
pub mod tensors;
#[cfg(feature = "wgpu")]
#[path = "../../../tests/common/wgpu_devices.rs"]
pub mod wgpu_devices;

pub use runs::{logits, run_dir, tiny, tiny_model};
pub use tensors::{Reference, max_abs, to_vec, values};
#[cfg(feature = "wgpu")]
pub use wgpu_devices::wgpu_devices;

mod checkpoints;
// The fused kernels: flex's CPU kernel, wgpu's CubeCL kernels.
#[cfg(any(feature = "flex", feature = "wgpu"))]
mod kernel_training;
#[cfg(feature = "wgpu")]
mod launches;
mod memory;
mod mixed_precision;
mod run;
mod tasks_training;
mod training_devices;
mod training_errors;

/// The run in `from` as a kill after the checkpoint of step `step` leaves it, in the fresh folder
/// of test `name`: its `train.json`, and that checkpoint's records, each with the sidecar (size
/// and checksum) that makes the checkpoint complete.
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
