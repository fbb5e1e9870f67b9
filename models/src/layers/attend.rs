//! What a mechanism's module does for its layer ([`Attend`]), what it sees of the layer
//! ([`Heads`]), what it builds its weights from ([`Shape`], [`Projections`]), and its decoding
//! state ([`LayerCache`]). Each mechanism's module owns its weights and runs itself: its
//! parallel forward, its decoding step with its cache state, and its segment memory; the layer
//! holds one in [`Mixer`](crate::layers::Mixer).

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};

use super::LayerError;
use crate::layers::cache::{CachePositions, KvCache};
use crate::layers::norm::RmsNorm;
use crate::layers::segment_memory::LayerMemory;
use crate::layers::taylor::LinearState;
use swa_attention::layer_ops::linear;
use swa_attention::split::split;
use swa_attention::{ModelBackend, Rope, ScoreOptions};

/// The shape of a layer's heads, from which a mechanism's module builds its weights.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Model width `d`.
    pub d_model: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `H_kv`.
    pub kv_heads: usize,
    /// Head width `d_h`.
    pub head_dim: usize,
}

impl Shape {
    /// q, k, v projections of these heads, with biases if `bias`.
    pub fn projections<B: Backend>(&self, bias: bool, device: &B::Device) -> Projections<B> {
        let width = (self.heads + 2 * self.kv_heads) * self.head_dim;
        Projections { qkv: LinearConfig::new(self.d_model, width).with_bias(bias).init(device) }
    }

    /// The output projection `[H·d_h, d]`, without bias.
    pub fn output<B: Backend>(&self, device: &B::Device) -> Linear<B> {
        let width = self.heads * self.head_dim;
        LinearConfig::new(width, self.d_model).with_bias(false).init(device)
    }
}

/// What a mechanism's module sees of the layer around it: the heads' shape, the layer's score
/// options, its rotation, and the per-head norms of q and k.
pub struct Heads<'a, B: Backend> {
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `H_kv`.
    pub kv_heads: usize,
    /// Head width `d_h`.
    pub head_dim: usize,
    /// The mechanism's score options with the layer's scale and softcap.
    pub scores: &'a ScoreOptions,
    /// RoPE at the head width (docs/semantics.md §4).
    pub rope: &'a Rope,
    pub(crate) query_norm: Option<&'a RmsNorm<B>>,
    pub(crate) key_norm: Option<&'a RmsNorm<B>>,
}

impl<B: ModelBackend> Heads<'_, B> {
    /// q `[batch, H, N, d_h]` and k, v `[batch, H_kv, N, d_h]` of `x: [batch, N, d_model]`,
    /// from one product and three views of its heads; q and k normalised per head if the
    /// layer says so, before RoPE.
    pub fn project(
        &self,
        p: &Projections<B>,
        x: Tensor<B, 3>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, n, _] = x.dims();
        let (heads, kv_heads) = (self.heads, self.kv_heads);
        // Heads first, then the parts: a reshape of the contiguous product moves nothing, where
        // one of a part (a strided view) may copy it.
        let qkv = linear(&p.qkv, x).reshape([batch, n, heads + 2 * kv_heads, self.head_dim]);
        let mut parts = split(qkv, 2, &[heads, kv_heads, kv_heads]).into_iter();
        let mut next = || parts.next().expect("three parts").swap_dims(1, 2);
        let norm = |t: Tensor<B, 4>, norm: Option<&RmsNorm<B>>| match norm {
            Some(norm) => norm.forward(t),
            None => t,
        };
        let q = norm(next(), self.query_norm);
        let k = norm(next(), self.key_norm);
        (q, k, next())
    }

    /// The heads merged and projected back by `output`: `[batch, H, N, d_h]` →
    /// `[batch, N, d_model]`.
    pub fn merge(&self, output: &Linear<B>, out: Tensor<B, 4>) -> Tensor<B, 3> {
        let [batch, heads, n, head_dim] = out.dims();
        linear(output, out.swap_dims(1, 2).reshape([batch, n, heads * head_dim]))
    }
}

/// The q, k, v projections of one set of heads as one linear layer, so that a single product
/// gives all three (one launch on a GPU rather than three); biases only under
/// [`LayerOptions::qkv_bias`](crate::layers::LayerOptions::qkv_bias).
#[derive(Module, Debug)]
pub struct Projections<B: Backend> {
    /// `[W_q | W_k | W_v]`, `[d, (H + 2·H_kv)·d_h]` as Burn stores it: the columns of q, then
    /// those of k, then those of v.
    pub(crate) qkv: Linear<B>,
}

impl<B: Backend> Projections<B> {
    /// A copy with its own parameters (new ids), so that it trains separately.
    pub(crate) fn copy(&self) -> Self {
        let qkv = Linear {
            weight: Param::from_tensor(self.qkv.weight.val()),
            bias: self.qkv.bias.as_ref().map(|b| Param::from_tensor(b.val())),
        };
        Self { qkv }
    }
}

/// What every mechanism's module does for its layer. `x` is the layer's input after the
/// block's norm, `[batch, N, d_model]`; outputs are `[batch, N, d_model]`.
pub trait Attend<B: ModelBackend> {
    /// The parallel forward pass at positions `0 … N−1`.
    fn forward(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError>;

    /// The attention weights of every head, `[batch, H, N, N]` (see
    /// [`SelfAttention::attention_map`](crate::layers::SelfAttention::attention_map)).
    fn attention_map(&self, heads: &Heads<B>, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError>;

    /// An empty decoding state for `batch` sequences.
    fn cache(
        &self,
        heads: &Heads<B>,
        batch: usize,
        positions: CachePositions,
        device: &B::Device,
    ) -> Result<LayerCache<B>, LayerError>;

    /// One decoding step, `x: [batch, 1, d_model]` at the cache's next position.
    fn step(&self, heads: &Heads<B>, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3>;

    /// The forward pass over a prompt, filling the empty `cache` as stepping would.
    fn prefill(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError>;

    /// Whether keys at fixed positions stay visible to every later query (sinks, global
    /// tokens), so that a cache cannot renumber its positions.
    fn pins_positions(&self) -> bool;

    /// An empty segment memory for `batch` streams (docs/semantics.md §10); full attention
    /// keeps `full_memory` positions.
    fn memory(
        &self,
        batch: usize,
        full_memory: usize,
        device: &B::Device,
    ) -> Result<LayerMemory<B>, LayerError>;

    /// Whether a segment of `segment` tokens at stream position `start` can be read with
    /// memory: the errors of [`Attend::memory`] and [`Attend::forward_in_stream`], before any
    /// work or allocation.
    fn check_segment(&self, _segment: usize, _start: usize) -> Result<(), LayerError> {
        Ok(())
    }

    /// The next segment of a stream, at stream positions `memory.start() …`, seeing what
    /// `memory` kept; then `memory` keeps what the next segment can see.
    fn forward_in_stream(
        &self,
        heads: &Heads<B>,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError>;
}

/// A layer's decoding state (docs/semantics.md §7), made by its mechanism's
/// [`Attend::cache`]. A clone is an independent copy (tensors are shared until one of the
/// copies writes).
#[derive(Clone)]
#[non_exhaustive]
pub enum LayerCache<B: Backend> {
    /// The bounded cache of the keys and values a windowed mechanism's queries can still see.
    Keys(KvCache<B>),
    /// Longformer's: the local projections' cache, and the global projections' with the
    /// global positions, kept only until the last global position.
    Longformer {
        /// Keys and values of the layer's ordinary projections.
        local: KvCache<B>,
        /// Keys and values of `Wk_g, Wv_g`, with the global positions.
        global: Option<(KvCache<B>, Vec<usize>)>,
    },
    /// Linear attention's recurrent state (docs/semantics.md §6).
    Linear(LinearState<B>),
}

impl<B: Backend> LayerCache<B> {
    /// Bytes held by the cached keys and values or the recurrent state.
    pub fn bytes(&self) -> usize {
        match self {
            Self::Keys(cache) => cache.bytes(),
            Self::Longformer { local, global } => {
                local.bytes() + global.as_ref().map_or(0, |(cache, _)| cache.bytes())
            }
            Self::Linear(state) => state.bytes(),
        }
    }
}
