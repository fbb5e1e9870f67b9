//! Tests of `swa-training`: runs with Burn's Learner (exact resume, checkpoints, evaluation),
//! their errors, the synthetic tasks and mixed precision's mechanics, on ndarray. One binary,
//! since every test binary links Burn; `swa-zoo train` itself (kills, stops, the run lock, a full
//! disk, its errors) is tested in the facade's `zoo` binary, and so is training on the other
//! backends and devices (the fused kernels, several devices, half precision on wgpu, the kernel
//! launches of a step): a binary that names a backend compiles all of Burn's code for it, which
//! the facade's library has already compiled (docs/testing.md, "What the time goes to").

#[path = "../../../tests/common/runs.rs"]
pub mod runs;
#[path = "../../../tests/common/tensors.rs"]
pub mod tensors;

pub use runs::{logits, run_dir, tiny, tiny_model};
pub use tensors::{Reference, max_abs, to_vec, values};

mod checkpoints;
mod divergence;
mod memory;
mod mixed_precision;
mod run;
mod tasks_training;
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
