//! The host side of the kernels: each launch checks the call, picks the kernel family the
//! device and the inputs allow (FlashAttention-2's on CUDA, cooperative matrices where the
//! device has a tile, the portable kernels otherwise) and launches it.
//!
//! - [`forward`]: the forward kernels; [`backward`]: the row terms, dQ and dK/dV.
//! - [`decode`] and [`cache_write`]: the bounded caches' decode step and append.

pub(crate) mod backward;
pub(crate) mod cache_write;
pub(crate) mod decode;
pub(crate) mod forward;
