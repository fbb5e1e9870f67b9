//! The seam of a fused decode step (docs/semantics.md §7): what a backend with one receives from
//! a layer's bounded cache (`swa_models::layers::cache`) at each generated token.
//!
//! A backend offers the step through [`crate::WindowedAttentionBackend::windowed_decode`]; the
//! cache then hands it the query and every ring buffer at once, instead of running a chain of
//! tensor ops per buffer; likewise, through
//! [`crate::WindowedAttentionBackend::windowed_cache_write`], the new position's key and value go
//! into every buffer in one op. Both turn their row by RoPE themselves (the query, the new key),
//! so a decoding layer launches no rotation of its own. `Flex` offers both (`crate::cpu`, feature
//! `flex`), and so do the CubeCL backends and their fusion types (`crate::kernel`, feature `cube`).

use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;

use crate::rope::RopeAngles;
use crate::{ScoreOptions, WindowSpec};

/// One ring buffer of a layer's cache.
#[derive(Clone, Debug)]
pub struct CachedBuffer<'a, B: Backend> {
    /// Keys `[batch, kv_heads.len(), slots, d]`, rotated at their absolute positions.
    pub keys: FloatTensor<B>,
    /// Values, shaped as `keys`.
    pub values: FloatTensor<B>,
    /// The kv heads held, in the order of the second axis.
    pub kv_heads: &'a [usize],
    /// The position each slot holds.
    pub positions: &'a [usize],
}

/// What a decode step attends with: the layer's spec (one per LongNet branch), its options, the
/// position of the query and the query's rotation.
#[derive(Clone, Copy, Debug)]
pub struct DecodeStep<'a> {
    /// One spec, or one per LongNet branch (mixed by their log-normalisers, docs/semantics.md
    /// §5); all share heads and kv heads.
    pub specs: &'a [WindowSpec],
    /// The layer's score options.
    pub opts: &'a ScoreOptions,
    /// The query's absolute position `t`; the cache holds positions up to `t`.
    pub position: usize,
    /// RoPE at `t` (one row of angles), which the step turns the query by before it scores; or
    /// `None` when the query comes as it is scored (a layer without RoPE). Turning it in the
    /// step saves the rotation's launch per layer and token.
    pub rope: Option<&'a RopeAngles>,
}

/// A fused decode step: `q: [batch, H, 1, d]`, turned by the step's `rope` if any, against the
/// buffers that hold every kv head → `o: [batch, H, 1, d]`; each head sees the slots
/// [`WindowSpec::visible`] allows at their positions, and rows that see none get 0.
pub type DecodeKernel<B> =
    fn(FloatTensor<B>, &[CachedBuffer<'_, B>], &DecodeStep<'_>) -> FloatTensor<B>;

/// One ring buffer's slot that the new position overwrites (its oldest recent position).
#[derive(Clone, Debug)]
pub struct SlotWrite<'a, B: Backend> {
    /// Keys `[batch, kv_heads.len(), slots, d]`.
    pub keys: FloatTensor<B>,
    /// Values, shaped as `keys`.
    pub values: FloatTensor<B>,
    /// The kv heads held, in the order of the second axis.
    pub kv_heads: &'a [usize],
    /// The slot to overwrite.
    pub slot: usize,
}

/// A fused append: writes the new position's key and value, `k, v: [batch, H_kv, 1, d]` (every
/// kv head), into each buffer's slot, for its own kv heads → each buffer's keys and values, in
/// order; the key turned by `rope` (RoPE at the new position, one row of angles) if given, as
/// the cache keeps keys rotated. One op per layer where the tensor path rotates the key and
/// writes two tensors per buffer (four buffers for MSWA's window groups).
pub type CacheWrite<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    Option<&RopeAngles>,
    Vec<SlotWrite<'_, B>>,
) -> Vec<[FloatTensor<B>; 2]>;
