//! Tests of the application in the facade ([`app`]): the command line and its runs (kills,
//! stops, the run lock, a full disk, errors and reports), the cross-backend check, the
//! benchmarks, the examples, the `--hf` commands; the models on the backends beside the
//! reference ([`backends`]); and the [`mutations`] of every input the project reads. One binary,
//! since every test binary links Burn; the member crates' tests are their own binaries
//! (swa-attention's `attention`, swa-models' `models`, swa-training's `training`).

mod app;
mod backends;
mod mutations;

#[path = "../common/decoding.rs"]
pub mod decoding;
#[path = "../common/runs.rs"]
pub mod runs;
#[path = "../common/tensors.rs"]
pub mod tensors;
#[cfg(feature = "wgpu")]
#[path = "../common/wgpu_devices.rs"]
pub mod wgpu_devices;

pub use runs::{logits, run_dir, tiny, tiny_model};
pub use tensors::{Reference, max_abs, to_vec, values};
#[cfg(feature = "wgpu")]
pub use wgpu_devices::wgpu_devices;
