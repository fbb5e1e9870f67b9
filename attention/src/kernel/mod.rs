//! CubeCL kernels of the windowed core, forward and backward, for every CubeCL runtime (wgpu,
//! CUDA): the fast path of [`crate::windowed_attention`] on `CubeBackend`, on `Fusion` around it
//! (Burn's default `Wgpu` and `Cuda` types) and on `Autodiff` around either.
//!
//! They compute exactly what the dense reference [`crate::reference::dense_attention`]
//! computes (docs/semantics.md §1–§2, §4), and the tests compare them with it
//! (`attention/tests/attention/kernel.rs`). Calls they do not take (`windowed_runs` in `cube`:
//! global tokens, big head dims) run the blocked path.
//!
//! Shared by every kernel:
//! - `config`: the compile-time variant, the runtime scalars and the per-head windows.
//! - `visibility`: the cube-side twin of [`crate::WindowSpec::visible`]; `reach`: which tiles
//!   a cube visits; `score`: scores and weights of a pair; `tile`: the shared-memory copies.
//! - `prologue`: what every kernel starts with (its rows' place in the grid, the head's window
//!   and ALiBi slope, rows into registers).
//!
//! The kernels, by family:
//! - `portable`: the forward, the backward's row terms, dQ and dK/dV in plain CubeCL, on every
//!   runtime and float type.
//! - `cmma`: the same on tensor cores through cooperative matrices, which the launches pick
//!   where the device has a tile for the inputs' type.
//! - `flash`: the forward, dQ and dK/dV of FlashAttention-2's design on the fragment seam,
//!   which CUDA's launches pick (sm_80 and later, d = 64 and 128).
//! - `fragment`: the fragment seam, warp-level `m16n8k16` products on CUDA's MMA instructions or
//!   emulated with the same layout on any device (its child `emulated`), and `fragment::probe`,
//!   every operation of it on a device, for the tests.
//! - `cache`: the bounded caches' fused decode step and append.
//! - `rope`: RoPE as one launch (kernel and host side).
//!
//! Around them:
//! - `launch`: the host side, which picks a family and launches it (forward, backward, decode,
//!   cache append).
//! - `cube`: the kernels as `CubeBackend`'s core (`crate::autodiff` makes them one
//!   differentiable op of `Autodiff<B>`); `fusion`: as custom ops of `Fusion<B>`.
//! - `probe`: the visibility twin run on a device, for the tests.
//! - `cuda_check` (feature `cuda-check`): the kernels' CUDA C++, made without a device, for the
//!   offline CUDA check (`.ci/cuda-check`); no runtime path uses it.

mod cache;
mod cmma;
mod config;
mod cube;
#[cfg(feature = "cuda-check")]
mod cuda_check;
mod flash;
mod fragment;
mod fusion;
mod launch;
mod portable;
mod probe;
mod prologue;
mod reach;
mod rope;
mod score;
mod tile;
mod visibility;

pub use cmma::tensor_core_tile_of;
pub use cube::{MAX_KERNEL_HEAD_DIM, MAX_KERNEL_LEN};
/// CubeCL's CUDA runtime, the `R` of the probes on CUDA for tests outside the crate (Burn does
/// not re-export it).
#[cfg(feature = "cuda")]
pub use cubecl::cuda::CudaRuntime;
#[cfg(feature = "cuda-check")]
pub use cuda_check::{KernelSource, cuda_sources, write_cuda_sources};
pub use flash::flash_kernel_runs;
pub use fragment::FragmentPath;
pub use fragment::probe::{FragmentProbe, probe_fragments};
pub use launch::backward::{EmulatedGrads, grads_emulated};
pub use launch::forward::{EmulatedOutputs, forward_emulated};
pub use probe::probe_visibility;
