//! # swa-attention
//!
//! The windowed attention core of swa-zoo and its building blocks. Every mechanism of
//! `docs/semantics.md` (sliding windows, multi-scale windows, SWAT, LongNet branches, Longformer,
//! attention sinks, full causal attention) is one call of [`windowed_attention`] with a
//! [`WindowSpec`] saying which keys each query sees and [`ScoreOptions`] saying how scores are
//! formed.
//!
//! Three implementations answer the same call:
//! - [`dense_attention`], the O(N²) reference for tests ([`reference`](mod@reference));
//! - [`blocked_attention`], the O(N·w) tensor-op path that runs and differentiates everywhere
//!   ([`blocked`], scheduled by `plan`);
//! - fused kernels, plugged in through [`WindowedAttentionBackend`] ([`backend`]): the CubeCL
//!   kernels for wgpu and CUDA (`kernel`, feature `cube`) and the CPU kernel for `Flex` ([`cpu`],
//!   feature `flex`), both differentiated by `Autodiff<B>` through their own backward.
//!
//! MSWA's four windows over eight query heads sharing two kv heads, checked against the
//! reference:
//!
//! ```
//! use burn::backend::NdArray;
//! use burn::tensor::{Distribution, Tensor};
//! use swa_attention::{ScoreOptions, WindowSpec, dense_attention, windowed_attention};
//!
//! let device = Default::default();
//! let noise = |heads| Tensor::<NdArray, 4>::random([1, heads, 40, 8], Distribution::Default,
//! &device); let (q, k, v) = (noise(8), noise(2), noise(2));
//! // Query head h sees the keys i − W_h + 1 … i (docs/semantics.md §2).
//! let spec = WindowSpec::per_head(&[2, 2, 4, 4, 8, 8, 16, 16], 2)?;
//! let opts = ScoreOptions::softmax();
//! let (out, _lse) = windowed_attention(q.clone(), k.clone(), v.clone(), &spec, &opts)?;
//! let (reference, _) = dense_attention(q, k, v, &spec, &opts)?;
//! out.into_data().assert_approx_eq::<f32>(&reference.into_data(), Default::default());
//! # Ok::<(), swa_attention::AttentionError>(())
//! ```

pub mod alibi;
mod autodiff;
pub mod backend;
pub mod blocked;
#[cfg(feature = "flex")]
pub mod cpu;
pub mod decode;
mod entry;
mod error;
mod fused_ops;
pub mod index;
#[cfg(feature = "cube")]
pub mod kernel;
/// CubeCL, the CubeCL backends' compiler and runtime, for its configuration
/// (`cubecl::config`: profiling logs, compilation and autotune caches).
#[cfg(feature = "cube")]
pub use cubecl;
pub mod layer_ops;
mod layer_ops_autodiff;
mod mask;
mod options;
pub mod packed;
mod plan;
pub mod reciprocal;
pub mod reference;
pub mod relative;
pub mod rng;
pub mod rope;
mod rope_op;
pub mod scores;
pub mod split;
pub mod window;

pub use backend::{
    KernelForward, KernelGradients, ModelBackend, OutputPrimitives, WindowedAttentionBackend,
    WindowedKernel, WindowedKernelBackend,
};
pub use blocked::{
    blocked_attention, blocked_attention_chunked, blocked_attention_relative, scheduled_scores,
};
pub use entry::{expand_kv, windowed_attention, windowed_attention_relative};
pub use error::AttentionError;
pub use fused_ops::{FUSED_OPS_VARIABLE, fused_ops_off};
pub use layer_ops::LayerOpsBackend;
pub use options::{ScoreFn, ScoreOptions};
pub use reference::{dense_attention, dense_attention_relative};
pub use rope::{
    Rope, RopeAngles, RopeBackend, RopeConfig, RopeScaling, RotateKernel, rotate_tensor_ops,
};
pub use window::{HeadWindow, WindowSpec};
