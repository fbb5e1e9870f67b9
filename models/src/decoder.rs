//! The decoder language model: embeddings, a stack of Transformer++ blocks whose attention kind
//! is given per layer as data, a final RMSNorm and the LM head (docs/semantics.md §8).

use burn::config::Config;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Int, Tensor, backend::Backend};
use swa_attention::WindowedAttentionBackend;
use swa_attention::layers::{AttentionKind, CachePositions, LayerCache};

use crate::block::Block;
use crate::error::{ModelError, in_layer};
use crate::norm::{RmsNorm, RmsNormConfig};

/// Configuration of [`Decoder`]. Saved and loaded as JSON with Burn's `Config::save`/`load`.
#[derive(Config, Debug)]
pub struct DecoderConfig {
    /// Vocabulary size (256 for byte-level text).
    pub vocab_size: usize,
    /// Model width `d`.
    pub d_model: usize,
    /// Number of blocks `L`.
    pub layers: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Key/value heads `H_kv` (GQA); must divide `H`.
    pub kv_heads: usize,
    /// The attention kind of each layer. A list shorter than `layers` is a pattern repeated
    /// cyclically: MSWA's hybrid "linear, local, local" is three entries.
    pub attention: Vec<AttentionKind>,
    /// Share the embedding matrix with the LM head.
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// RoPE base of every layer (docs/semantics.md §4).
    #[config(default = "10000.0")]
    pub rope_base: f64,
}

impl DecoderConfig {
    /// The attention kind of layer `l`.
    pub fn kind_of(&self, layer: usize) -> &AttentionKind {
        &self.attention[layer % self.attention.len()]
    }

    /// Checks the configuration without building it.
    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |field, problem: &str| Err(ModelError::Config { field, problem: problem.into() });
        if self.vocab_size == 0 {
            return bad("DecoderConfig.vocab_size", "must be at least 1");
        }
        if self.layers == 0 {
            return bad("DecoderConfig.layers", "must be at least 1");
        }
        if self.attention.is_empty() {
            return bad("DecoderConfig.attention", "needs at least one attention kind");
        }
        if self.heads == 0 || !self.d_model.is_multiple_of(self.heads) {
            return bad("DecoderConfig.d_model", "must be a multiple of heads");
        }
        if self.kv_heads == 0 || !self.heads.is_multiple_of(self.kv_heads) {
            return bad("DecoderConfig.kv_heads", "must divide heads (GQA)");
        }
        for layer in 0..self.layers {
            self.kind_of(layer).validate(self.heads, self.kv_heads).map_err(in_layer(layer))?;
        }
        Ok(())
    }

    /// Builds the model with random weights, drawn now (see [`Materialize`]); fails, naming
    /// the field or layer, on an invalid configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<Decoder<B>, ModelError> {
        self.validate()?;
        let blocks = (0..self.layers)
            .map(|l| {
                let kind = self.kind_of(l).clone();
                Block::new(self.d_model, self.heads, self.kv_heads, kind, self.rope_base, device)
                    .map_err(in_layer(l))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let head = (!self.tie_embeddings).then(|| {
            LinearConfig::new(self.d_model, self.vocab_size).with_bias(false).init(device)
        });
        let model = Decoder {
            embedding: EmbeddingConfig::new(self.vocab_size, self.d_model).init(device),
            blocks,
            norm: RmsNormConfig::new(self.d_model).init(device),
            head,
        };
        model.visit(&mut Materialize);
        Ok(model)
    }
}

/// Draws every parameter's value at once, in place. Burn 0.21 initialises parameters lazily,
/// and a clone of a parameter not yet drawn draws its own values: evaluating a clone of a fresh
/// model (as an evaluation or a rebuild under another config does) would score other weights
/// than the model's own, and a record of a clone would hold other weights than the model then
/// has. [`DecoderConfig::init`] and [`crate::weights::save_record`] run it.
pub(crate) struct Materialize;

impl<B: Backend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        param.val();
    }
}

/// A decoder-only language model.
#[derive(Module, Debug)]
pub struct Decoder<B: Backend> {
    embedding: Embedding<B>,
    blocks: Vec<Block<B>>,
    norm: RmsNorm<B>,
    /// The LM head; `None` when tied to the embedding.
    head: Option<Linear<B>>,
}

/// The decoding state of every layer (docs/semantics.md §7), made by [`Decoder::cache`]. A clone is an
/// independent copy: decoding can fork from any position.
#[derive(Clone)]
pub struct DecoderCache<B: Backend> {
    layers: Vec<LayerCache<B>>,
    len: usize,
}

impl<B: Backend> DecoderCache<B> {
    /// Tokens decoded so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been decoded yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by every layer's cached keys and values or recurrent state. Constant once
    /// the windows are full, for every kind but full attention.
    pub fn bytes(&self) -> usize {
        self.layers.iter().map(LayerCache::bytes).sum()
    }
}

impl<B: Backend> Decoder<B> {
    /// The blocks, in order.
    pub fn blocks(&self) -> &[Block<B>] {
        &self.blocks
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.embedding.weight.dims()[0]
    }

    /// An empty decoding state for `batch` sequences. `positions` chooses StreamingLLM's
    /// position shift for sink layers ([`CachePositions::Streaming`]) or absolute positions,
    /// which reproduce [`Decoder::forward`]. Fails, naming the layer, for an encoder layer.
    pub fn cache(
        &self,
        batch: usize,
        positions: CachePositions,
        device: &B::Device,
    ) -> Result<DecoderCache<B>, ModelError> {
        let layers = self
            .blocks
            .iter()
            .enumerate()
            .map(|(l, b)| b.attention().cache(batch, positions, device).map_err(in_layer(l)))
            .collect::<Result<_, _>>()?;
        Ok(DecoderCache { layers, len: 0 })
    }

    /// One decoding step: `tokens: [batch]` at the cache's next position → logits
    /// `[batch, vocab]`, the same as that position's row of [`Decoder::forward`] over the
    /// whole prefix (with absolute positions).
    pub fn step(&self, tokens: Tensor<B, 1, Int>, cache: &mut DecoderCache<B>) -> Tensor<B, 2>
    where
        B: WindowedAttentionBackend,
    {
        let mut x = self.embedding.forward(tokens.unsqueeze_dim(1));
        for (block, layer) in self.blocks.iter().zip(&mut cache.layers) {
            x = block.step(x, layer);
        }
        cache.len += 1;
        self.logits(x).squeeze_dim(1)
    }

    /// The final norm and LM head: `x: [batch, N, d]` → `[batch, N, vocab]`.
    fn logits(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let x = self.norm.forward(x);
        match &self.head {
            Some(head) => head.forward(x),
            None => x.matmul(self.embedding.weight.val().transpose().unsqueeze()),
        }
    }
}

impl<B: WindowedAttentionBackend> Decoder<B> {
    /// `tokens: [batch, N]` → logits `[batch, N, vocab]`, token `n` at position `n`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Result<Tensor<B, 3>, ModelError> {
        let mut x = self.embedding.forward(tokens);
        for (l, block) in self.blocks.iter().enumerate() {
            x = block.forward(x).map_err(in_layer(l))?;
        }
        Ok(self.logits(x))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use swa_attention::layers::AttentionKind;

    use super::*;

    #[test]
    fn a_clone_of_a_fresh_model_holds_its_weights() {
        let config = DecoderConfig::new(16, 8, 1, 2, 2, vec![AttentionKind::Full]);
        let model = config.init::<NdArray>(&Default::default()).unwrap();
        let clone = model.clone();
        let weights = |m: &Decoder<NdArray>| m.embedding.weight.val().into_data();
        assert_eq!(weights(&model), weights(&clone));
    }
}
