//! What a [`SelfAttention`](crate::layers::SelfAttention) layer mixes the tokens with, as one
//! enum module ([`Mixer`]): the windowed core's projections, or Taylor linear attention with
//! projections of its own. A layer holds exactly the weights of its kind, so no code has to
//! assume that an optional part is present.
//!
//! The variant is a segment of every tensor name below it (Burn's derive enters a module named
//! after the variant): `attention.mixer.Windowed.local.qkv.weight`,
//! `attention.mixer.Linear.query.weight`.

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::backend::Backend;

use crate::layers::linear::LinearAttention;

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

/// The weights of a layer that attends through the windowed core: every
/// [`AttentionKind`](crate::layers::AttentionKind) but `Linear`.
#[derive(Module, Debug)]
pub struct WindowedMixer<B: Backend> {
    /// q, k, v projections.
    pub(crate) local: Projections<B>,
    /// Longformer's `Wq_g, Wk_g, Wv_g`, initialised as copies of `local`; present only for
    /// Longformer with global positions.
    pub(crate) global: Option<Projections<B>>,
    /// Output projection, `[H·d_h, d]`.
    pub(crate) output: Linear<B>,
}

/// How a layer mixes its tokens, with the weights of that way only.
#[derive(Module, Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per layer, whose tensors are on the device: boxing would save a few hundred bytes"
)]
#[non_exhaustive]
pub enum Mixer<B: Backend> {
    /// Attention through the windowed core: q, k, v projections, Longformer's global ones,
    /// output.
    Windowed(WindowedMixer<B>),
    /// Taylor linear attention (its own projections and RoPE).
    Linear(LinearAttention<B>),
}
