//! The core's tensor helpers that the attention layers build on (self-attention, LongNet's
//! branches, Longformer's global rows, linear attention, the caches), public in one place so
//! that a layer uses them as the core does rather than reaching into its modules: repeating kv
//! heads for grouped queries, gathering rows by index, a reciprocal with an exact gradient,
//! attention over an explicit mask, the distances a relative table covers, and the switch that
//! turns every fused op off.

pub use crate::entry::expand_kv;
pub use crate::fused_ops::fused_ops_off;
pub use crate::index::{index_tensor, inverse_permutation};
pub use crate::reciprocal::reciprocal;
pub use crate::relative::distances_needed;
pub use crate::scores::{Alibi, attend};
