//! The decoder block, "Transformer++" (docs/semantics.md §8): pre-norm attention and gated MLP,
//! each with a residual connection, and in Gemma 2/3 a second norm on each branch's output
//! (docs/semantics.md §9).

use crate::layers::LayerError;
use crate::layers::{
    LayerCache, LayerMemory, RmsNorm, RmsNormConfig, SelfAttention, SelfAttentionConfig,
};
use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};
use swa_attention::ModelBackend;

use crate::mlp::{GatedMlp, GatedMlpConfig};

/// One decoder block.
#[derive(Module, Debug)]
pub struct Block<B: Backend> {
    attention_norm: RmsNorm<B>,
    attention: SelfAttention<B>,
    /// Gemma's `post_attention_layernorm`, on the attention's output before the residual.
    post_attention_norm: Option<RmsNorm<B>>,
    mlp_norm: RmsNorm<B>,
    mlp: GatedMlp<B>,
    /// Gemma's `post_feedforward_layernorm`, on the MLP's output before the residual.
    post_mlp_norm: Option<RmsNorm<B>>,
}

impl<B: Backend> Block<B> {
    /// A block of `attention`'s width: its norms are `norm` (at that width), its MLP `mlp`, and
    /// with `post_norms` each branch's output is normalised again.
    pub fn new(
        attention: &SelfAttentionConfig,
        mlp: &GatedMlpConfig,
        norm: &RmsNormConfig,
        post_norms: bool,
        device: &B::Device,
    ) -> Result<Self, LayerError> {
        let norm = || norm.init(device);
        Ok(Self {
            attention_norm: norm(),
            attention: attention.init(device)?,
            post_attention_norm: post_norms.then(norm),
            mlp_norm: norm(),
            mlp: mlp.init(device),
            post_mlp_norm: post_norms.then(norm),
        })
    }

    /// The block's attention layer.
    pub fn attention(&self) -> &SelfAttention<B> {
        &self.attention
    }
}

/// `y`, normalised again when the block has post-norms.
fn post_norm<B: ModelBackend>(norm: &Option<RmsNorm<B>>, y: Tensor<B, 3>) -> Tensor<B, 3> {
    match norm {
        Some(norm) => norm.forward(y),
        None => y,
    }
}

impl<B: ModelBackend> Block<B> {
    /// The MLP branch and its residual: `x: [batch, N, d]` → `[batch, N, d]`.
    fn mlp_branch(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let y = self.mlp.forward(self.mlp_norm.forward(x.clone()));
        x + post_norm(&self.post_mlp_norm, y)
    }

    /// The attention branch's residual, given the attention's output `y`.
    fn attention_residual(&self, x: Tensor<B, 3>, y: Tensor<B, 3>) -> Tensor<B, 3> {
        x + post_norm(&self.post_attention_norm, y)
    }

    /// One decoding step: `x: [batch, 1, d]` at the cache's next position → `[batch, 1, d]`.
    pub fn step(&self, x: Tensor<B, 3>, cache: &mut LayerCache<B>) -> Tensor<B, 3> {
        let y = self.attention.step(self.attention_norm.forward(x.clone()), cache);
        self.mlp_branch(self.attention_residual(x, y))
    }

    /// `x: [batch, N, d]` → `[batch, N, d]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 3>, LayerError> {
        let y = self.attention.forward(self.attention_norm.forward(x.clone()))?;
        Ok(self.mlp_branch(self.attention_residual(x, y)))
    }

    /// The next segment of a stream, `x: [batch, N, d]` → `[batch, N, d]`, its attention seeing
    /// what `memory` kept of the earlier segments (docs/semantics.md §10), which then keeps
    /// this segment's part.
    pub fn forward_in_stream(
        &self,
        x: Tensor<B, 3>,
        memory: &mut LayerMemory<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let y = self.attention.forward_in_stream(self.attention_norm.forward(x.clone()), memory)?;
        Ok(self.mlp_branch(self.attention_residual(x, y)))
    }

    /// The attention weights of the block's layer for its input `x: [batch, N, d]` →
    /// `[batch, H, N, N]` ([`SelfAttention::attention_map`]).
    pub fn attention_map(&self, x: Tensor<B, 3>) -> Result<Tensor<B, 4>, LayerError> {
        self.attention.attention_map(self.attention_norm.forward(x))
    }

    /// The forward pass over a prompt, filling the layer's empty `cache` as N steps would:
    /// `x: [batch, N, d]` → `[batch, N, d]`.
    pub fn prefill(
        &self,
        x: Tensor<B, 3>,
        cache: &mut LayerCache<B>,
    ) -> Result<Tensor<B, 3>, LayerError> {
        let y = self.attention.prefill(self.attention_norm.forward(x.clone()), cache)?;
        Ok(self.mlp_branch(self.attention_residual(x, y)))
    }
}
