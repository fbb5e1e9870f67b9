//! # swa-attention
//!
//! The windowed attention core of swa-zoo and its building blocks. Every mechanism of
//! `docs/semantics.md` (sliding windows, multi-scale windows, SWAT, LongNet branches, Longformer,
//! attention sinks, full causal attention) is one call of [`windowed_attention`] with a
//! [`WindowSpec`] saying which keys each query sees and [`ScoreOptions`] saying how scores are
//! formed.
//!
//! Three implementations answer the same call:
//! - [`dense_attention`], the O(N²) reference for tests ([`reference`]);
//! - [`blocked_attention`], the O(N·w) tensor-op path that runs and differentiates everywhere
//!   ([`blocked`], scheduled by `plan`);
//! - fused kernels, plugged in through [`WindowedAttentionBackend`] ([`backend`]): the CubeCL
//!   kernels for wgpu and CUDA (`kernel`, feature `cube`) and the CPU kernel for `Flex` ([`cpu`],
//!   feature `flex`), both differentiated by `Autodiff<B>` through their own backward.

pub mod alibi;
mod autodiff;
pub mod backend;
pub mod blocked;
#[cfg(feature = "flex")]
pub mod cpu;
pub mod decode;
mod entry;
mod error;
mod index;
#[cfg(feature = "cube")]
pub mod kernel;
pub mod layer_ops;
mod layer_ops_autodiff;
pub mod layers;
mod mask;
mod options;
mod plan;
mod reciprocal;
pub mod reference;
pub mod rope;
mod rope_op;
mod scores;
pub mod window;

pub use backend::{
    KernelForward, OutputPrimitives, PATH_VARIABLE, WindowedAttentionBackend, WindowedKernel,
    WindowedKernelBackend,
};
pub use blocked::{blocked_attention, blocked_attention_chunked, scheduled_scores};
pub use entry::windowed_attention;
pub use error::AttentionError;
pub use options::{ScoreFn, ScoreOptions};
pub use reference::dense_attention;
pub use rope::{Rope, RopeAngles, RopeConfig, RopeScaling, RotateKernel, rotate_tensor_ops};
pub use window::{HeadWindow, WindowSpec};
