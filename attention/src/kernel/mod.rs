//! CubeCL kernels of the windowed core, forward and backward, for every CubeCL runtime (wgpu,
//! CUDA): the fast path of [`crate::windowed_attention`] on `CubeBackend`, on `Fusion` around it
//! (Burn's default `Wgpu` and `Cuda` types) and on `Autodiff` around either.
//!
//! They compute exactly what the dense reference [`crate::reference::dense_attention`]
//! computes (docs/semantics.md §1–§2, §4), and the tests compare them with it
//! (`tests/attention/kernel.rs`). Calls they do not take (`windowed_runs` in `cube`: global
//! tokens, big head dims) run the blocked path.
//!
//! - `config`: the compile-time variant, the runtime scalars and the per-head windows.
//! - `visibility`: the cube-side twin of [`crate::WindowSpec::visible`]; `reach`: which tiles
//!   a cube visits; `score`: scores and weights of a pair; `tile`: the shared-memory copies.
//! - `prologue`: what every kernel starts with (its rows' place in the grid, the head's window
//!   and ALiBi slope, rows into registers).
//! - `forward` and `forward_launch`: the forward kernel and its launch (of all three forward
//!   kernels).
//! - `backward_rows`, `backward_queries` (dQ), `backward_keys` (dK, dV) and
//!   `backward_launch`: the backward kernels (FlashAttention-2) and their launch.
//! - `mma`: the tensor-core tile (cooperative matrices, `cmma`) and its products;
//!   `forward_cmma`, `backward_queries_cmma` and `backward_keys_cmma`: the forward, dQ and
//!   dK/dV on it, which the launches pick where the device has a tile for the inputs' type.
//! - `flash`, `flash_products`, `forward_flash`, `backward_queries_flash` and
//!   `backward_keys_flash`: the forward, dQ and dK/dV of FlashAttention-2's design on the
//!   fragment seam, which CUDA's launches pick (sm_80 and later, d = 64 and 128).
//! - `fragment` (with its child `emulated`): the fragment seam, warp-level `m16n8k16` products
//!   on CUDA's MMA instructions or emulated with the same layout on any device;
//!   `fragment_probe`: every operation of it on a device, for the tests.
//! - `decode` and `decode_launch`: the fused decode step of the bounded caches;
//!   `cache_write` and `cache_write_launch`: their fused append.
//! - `rope`: RoPE as one launch (kernel and host side).
//! - `cuda_source` and `cuda_definitions` (feature `cuda-check`): the kernels' CUDA C++, made
//!   without a device, for the offline CUDA check (`.ci/cuda-check`).
//! - `cube`: the kernels as `CubeBackend`'s core (`crate::autodiff` makes them one
//!   differentiable op of `Autodiff<B>`); `fusion`: as custom ops of `Fusion<B>`.

mod backward_keys;
mod backward_keys_cmma;
mod backward_keys_flash;
mod backward_launch;
mod backward_queries;
mod backward_queries_cmma;
mod backward_queries_flash;
mod backward_rows;
mod cache_write;
mod cache_write_launch;
mod config;
mod cube;
#[cfg(feature = "cuda-check")]
mod cuda_definitions;
#[cfg(feature = "cuda-check")]
mod cuda_source;
mod decode;
mod decode_launch;
mod flash;
mod flash_products;
mod forward;
mod forward_cmma;
mod forward_flash;
mod forward_launch;
mod fragment;
mod fragment_probe;
mod fusion;
mod mma;
mod probe;
mod prologue;
mod reach;
mod rope;
mod score;
mod tile;
mod visibility;

pub use backward_launch::{EmulatedGrads, grads_emulated};
pub use cube::{MAX_KERNEL_HEAD_DIM, MAX_KERNEL_LEN};
/// CubeCL's CUDA runtime, the `R` of the probes on CUDA for tests outside the crate (Burn does
/// not re-export it).
#[cfg(feature = "cuda")]
pub use cubecl::cuda::CudaRuntime;
#[cfg(feature = "cuda-check")]
pub use cuda_source::{KernelSource, cuda_sources, write_cuda_sources};
pub use flash::flash_kernel_runs;
pub use forward_launch::{EmulatedOutputs, forward_emulated};
pub use fragment::FragmentPath;
pub use fragment_probe::{FragmentProbe, probe_fragments};
pub use mma::tensor_core_tile_of;
pub use probe::probe_visibility;
