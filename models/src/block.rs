//! The decoder block, "Transformer++" (docs/semantics.md §8): pre-norm attention and SwiGLU MLP, each
//! with a residual connection.

use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};
use swa_attention::layers::{AttentionKind, LayerCache, SelfAttention, SelfAttentionConfig};
use swa_attention::{AttentionError, WindowedAttentionBackend};

use crate::mlp::{SwiGlu, SwiGluConfig};
use crate::norm::{RmsNorm, RmsNormConfig};

/// One decoder block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    attention_norm: RmsNorm<B>,
    attention: SelfAttention<B>,
    mlp_norm: RmsNorm<B>,
    mlp: SwiGlu<B>,
}

impl<B: Backend> Block<B> {
    /// A block of width `d_model` whose attention runs `kind`.
    pub fn new(
        d_model: usize,
        heads: usize,
        kv_heads: usize,
        kind: AttentionKind,
        rope_base: f64,
        device: &B::Device,
    ) -> Result<Self, AttentionError> {
        let attention = SelfAttentionConfig::new(d_model, heads, kv_heads, kind)
            .with_rope_base(rope_base)
            .init(device)?;
        Ok(Self {
            attention_norm: RmsNormConfig::new(d_model).init(device),
            attention,
            mlp_norm: RmsNormConfig::new(d_model).init(device),
            mlp: SwiGluConfig::new(d_model).init(device),
        })
    }

    /// The block's attention layer.
    pub fn attention(&self) -> &SelfAttention<B> {
        &self.attention
    }
}

impl<B: WindowedAttentionBackend> Block<B> {
    /// One decoding step: `x: [batch, 1, d]` at the cache's next position → `[batch, 1, d]`.
    pub fn step(&self, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let x = x.clone() + self.attention.step(self.attention_norm.forward(x), cache);
        x.clone() + self.mlp.forward(self.mlp_norm.forward(x))
    }

    /// `x: [batch, N, d]` → `[batch, N, d]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, AttentionError> {
        let x = x.clone() + self.attention.forward(self.attention_norm.forward(x))?;
        Ok(x.clone() + self.mlp.forward(self.mlp_norm.forward(x)))
    }
}
