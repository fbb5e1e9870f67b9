//! The portable kernels: plain CubeCL, one query row per unit, on every runtime and every
//! float type; the launches fall back to them where a device has no tensor-core tile for the
//! inputs' type or the call is not one the faster kernels take.
//!
//! - [`forward`]: the forward pass (output and log-sum-exp).
//! - [`backward_rows`]: the row terms `Dᵢ = rowsum(dOᵢ ∘ Oᵢ)` every backward path starts with.
//! - [`backward_queries`] (dQ) and [`backward_keys`] (dK, dV): FlashAttention-2's backward.

pub(crate) mod backward_keys;
pub(crate) mod backward_queries;
pub(crate) mod backward_rows;
pub(crate) mod forward;
