//! The decoder language model: embeddings, a stack of Transformer++ blocks whose attention kind
//! is given per layer as data, a final RMSNorm and the LM head (docs/semantics.md §8), with the
//! options that express pretrained architectures (docs/semantics.md §9).

use crate::layers::{
    AttentionKind, CachePositions, LayerCache, LayerOptions, RmsNorm, RmsNormConfig,
    SelfAttentionConfig,
};
use burn::config::Config;
use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{DType, Int, Tensor, backend::Backend, get_device_settings};
use swa_attention::ModelBackend;
use swa_attention::layer_ops::{embedding, linear, product};
use swa_attention::packed::held_bytes;

use crate::architecture::Architecture;
use crate::block::Block;
use crate::error::{ModelError, in_layer};
use crate::mlp::GatedMlpConfig;

/// Configuration of [`Decoder`]. Saved and loaded as JSON with Burn's `Config::save`/`load`.
#[derive(Config, Debug)]
pub struct DecoderConfig {
    /// Vocabulary size (256 for byte-level text).
    #[config(default = 256)]
    pub vocab_size: usize,
    /// Model width `d`.
    #[config(default = 256)]
    pub d_model: usize,
    /// Number of blocks `L`.
    #[config(default = 4)]
    pub layers: usize,
    /// Query heads `H`.
    #[config(default = 4)]
    pub heads: usize,
    /// Key/value heads `H_kv` (GQA), which must divide `H`; `None` is one per query head, as
    /// Hugging Face's `num_key_value_heads` when unset.
    #[config(default = "None")]
    pub kv_heads: Option<usize>,
    /// The attention kind of each layer. A list shorter than `layers` is a pattern repeated
    /// cyclically: MSWA's hybrid "linear, local, local" is three entries.
    pub attention: Vec<AttentionKind>,
    /// Share the embedding matrix with the LM head.
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// RoPE base of every layer (docs/semantics.md §4), or of the full-attention layers when
    /// `local_rope_base` is set.
    #[config(default = "10000.0")]
    pub rope_base: f64,
    /// What the decoder does otherwise than Transformer++ (docs/semantics.md §9); `None` is
    /// the default architecture, which departs in nothing.
    pub architecture: Option<Architecture>,
}

impl DecoderConfig {
    /// The attention kind of layer `l`.
    pub fn kind_of(&self, layer: usize) -> &AttentionKind {
        &self.attention[layer % self.attention.len()]
    }

    /// The decoder's architecture options, the default ones when unset.
    pub fn arch(&self) -> Architecture {
        self.architecture.clone().unwrap_or_default()
    }

    /// The number of key/value heads `H_kv`: [`DecoderConfig::kv_heads`], or `H` when unset.
    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }

    /// The head width `d_h`.
    pub fn head_width(&self) -> usize {
        self.arch().head_dim.unwrap_or(self.d_model / self.heads.max(1))
    }

    /// The RMSNorm of width `width` every norm of the model uses.
    pub fn norm(&self, width: usize) -> RmsNormConfig {
        let arch = self.arch();
        RmsNormConfig::new(width)
            .with_epsilon(arch.norm_epsilon)
            .with_unit_offset(arch.norm_unit_offset)
    }

    /// The attention layer of layer `l`: its kind, and its RoPE (docs/semantics.md §9: local
    /// layers may rotate with a base of their own).
    pub fn attention_of(&self, layer: usize) -> SelfAttentionConfig {
        let (kind, arch) = (self.kind_of(layer).clone(), self.arch());
        let (base, rope_scaling) = match arch.local_rope_base {
            Some(local) if !arch.global_layers.contains(&layer) => (local, None),
            _ => (self.rope_base, arch.rope_scaling),
        };
        let options = LayerOptions {
            rope_scaling,
            head_dim: arch.head_dim,
            qkv_bias: arch.qkv_bias,
            scale: arch.attention_scale,
            softcap: arch.attention_softcap,
            qk_norm: arch.qk_norm.then(|| self.norm(self.head_width())),
            sink_logits: arch.sink_logits,
            relative_positions: arch.relative_positions,
        };
        SelfAttentionConfig::new(self.d_model, self.heads, self.kv_heads(), kind)
            .with_rope_base(base)
            .with_options(options)
    }

    /// The MLP of every block.
    pub fn mlp(&self) -> GatedMlpConfig {
        let arch = self.arch();
        GatedMlpConfig::new(self.d_model)
            .with_hidden(arch.mlp_hidden)
            .with_activation(arch.mlp_activation)
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
        self.check_sizes()?;
        let arch = self.arch();
        if self.heads == 0 || (arch.head_dim.is_none() && !self.d_model.is_multiple_of(self.heads))
        {
            return bad("DecoderConfig.d_model", "must be a multiple of heads");
        }
        if self.head_width() == 0 || !self.head_width().is_multiple_of(2) {
            return bad("DecoderConfig.head_dim", "must be even and positive (RoPE)");
        }
        if arch.mlp_hidden == Some(0) {
            return bad("DecoderConfig.mlp_hidden", "must be at least 1");
        }
        if let Some(c) = arch.final_softcap.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return bad("DecoderConfig.final_softcap", &format!("must be positive, got {c}"));
        }
        if self.kv_heads() == 0 || !self.heads.is_multiple_of(self.kv_heads()) {
            return bad("DecoderConfig.kv_heads", "must divide heads (GQA)");
        }
        for layer in 0..self.layers {
            self.kind_of(layer).validate(self.heads, self.kv_heads()).map_err(in_layer(layer))?;
        }
        Ok(())
    }

    /// Builds the model with random weights, drawn now (see `Materialize`); fails, naming
    /// the field or layer, on an invalid configuration.
    pub fn init<B: Backend>(&self, device: &B::Device) -> Result<Decoder<B>, ModelError> {
        let model = self.init_lazy(device)?;
        self.check_memory()?;
        model.visit(&mut Materialize);
        Ok(model)
    }

    /// Builds the model with parameters not yet drawn, for a loader that replaces every one
    /// (drawing them first would take their memory twice).
    pub(crate) fn init_lazy<B: Backend>(
        &self,
        device: &B::Device,
    ) -> Result<Decoder<B>, ModelError> {
        self.validate()?;
        let (mlp, norm, arch) = (self.mlp(), self.norm(self.d_model), self.arch());
        let blocks = (0..self.layers)
            .map(|l| {
                Block::new(&self.attention_of(l), &mlp, &norm, arch.post_norms, device)
                    .map_err(in_layer(l))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let head = (!self.tie_embeddings).then(|| {
            LinearConfig::new(self.d_model, self.vocab_size).with_bias(false).init(device)
        });
        Ok(Decoder {
            embedding: EmbeddingConfig::new(self.vocab_size, self.d_model).init(device),
            blocks,
            norm: norm.init(device),
            head,
            embedding_scale: arch.scale_embeddings.then(|| (self.d_model as f64).sqrt()),
            final_softcap: arch.final_softcap,
        })
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
    /// Multiplier of the embeddings (Gemma's `√d`).
    embedding_scale: Option<f64>,
    /// Softcap of the logits (Gemma 2).
    final_softcap: Option<f32>,
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

    /// The bytes of [`DecoderCache::bytes`], layer by layer: a windowed layer's stop growing once
    /// its window is full, a full layer's grow with the sequence.
    pub fn layer_bytes(&self) -> Vec<usize> {
        self.layers.iter().map(LayerCache::bytes).collect()
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

    /// Bytes of the parameters as they are held, each in its own float type: with bf16
    /// weights ([`crate::hf::WeightPrecision`]) about half the bytes of f32.
    pub fn weight_bytes(&self) -> usize {
        struct Bytes(usize);
        impl<B: Backend> ModuleVisitor<B> for Bytes {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
                let value = param.val();
                self.0 += held_bytes(value.dtype(), value.shape().num_elements());
            }
        }
        let mut bytes = Bytes(0);
        self.visit(&mut bytes);
        bytes.0
    }

    /// Bytes of the embedding table as it is held.
    pub fn embedding_bytes(&self) -> usize {
        let table = self.embedding.weight.val();
        held_bytes(table.dtype(), table.shape().num_elements())
    }

    /// One decoding step: `tokens: [batch]` at the cache's next position → logits
    /// `[batch, vocab]`, the same as that position's row of [`Decoder::forward`] over the
    /// whole prefix (with absolute positions). Runs with the backend's threads awake
    /// ([`swa_attention::LayerOpsBackend::with_threads_awake`]).
    pub fn step(&self, tokens: Tensor<B, 1, Int>, cache: &mut DecoderCache<B>) -> Tensor<B, 2>
    where
        B: ModelBackend,
    {
        B::with_threads_awake(|| {
            let mut x = self.embed(tokens.unsqueeze_dim(1));
            for (block, layer) in self.blocks.iter().zip(&mut cache.layers) {
                x = block.step(x, layer);
            }
            cache.len += 1;
            self.logits(x).squeeze_dim(1)
        })
    }

    /// The embeddings of `tokens: [batch, N]` → `[batch, N, d]`, scaled if the model says so.
    /// A table kept in another float type than the backend's (bf16 weights on an f32 backend,
    /// [`crate::hf::WeightPrecision`]) gives rows in its own type, widened here, and a packed
    /// one its rows unpacked: only the looked-up rows are ever in the backend's type.
    pub(crate) fn embed(&self, tokens: Tensor<B, 2, Int>) -> Tensor<B, 3>
    where
        B: ModelBackend,
    {
        let x = embedding(&self.embedding, tokens);
        let float: DType = get_device_settings::<B>(&x.device()).float_dtype.into();
        let x = if x.dtype() == float { x } else { x.cast(float) };
        match self.embedding_scale {
            Some(scale) => x.mul_scalar(scale),
            None => x,
        }
    }

    /// The final norm and LM head: `x: [batch, N, d]` → `[batch, N, vocab]`, softcapped if the
    /// model says so.
    pub(crate) fn logits(&self, x: Tensor<B, 3>) -> Tensor<B, 3>
    where
        B: ModelBackend,
    {
        let x = self.norm.forward(x);
        let logits = match &self.head {
            Some(head) => linear(head, x),
            None => product(x, self.embedding.weight.val().transpose(), None),
        };
        match self.final_softcap {
            Some(c) => logits.div_scalar(c).tanh().mul_scalar(c),
            None => logits,
        }
    }
}

impl<B: ModelBackend> Decoder<B> {
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

    /// `tokens: [batch, N]` → logits `[batch, N, vocab]`, token `n` at position `n`.
    pub fn forward(&self, tokens: Tensor<B, 2, Int>) -> Result<Tensor<B, 3>, ModelError> {
        let mut x = self.embed(tokens);
        for (l, block) in self.blocks.iter().enumerate() {
            x = block.forward(x).map_err(in_layer(l))?;
        }
        Ok(self.logits(x))
    }

    /// The attention weights of each layer in `layers` over `tokens: [batch, N]`, in that
    /// order: `[batch, H, N, N]` each, row `i` the weights of query `i` (docs/semantics.md
    /// §9). Fails, naming it, for a layer that does not exist or has no weights (linear).
    pub fn attention_maps(
        &self,
        tokens: Tensor<B, 2, Int>,
        layers: &[usize],
    ) -> Result<Vec<Tensor<B, 4>>, ModelError> {
        if let Some(&layer) = layers.iter().find(|&&l| l >= self.blocks.len()) {
            let problem = format!("layer {layer} does not exist ({} layers)", self.blocks.len());
            return Err(ModelError::Config { field: "attention_maps.layers", problem });
        }
        let mut maps: Vec<Option<Tensor<B, 4>>> = vec![None; layers.len()];
        let last = layers.iter().max().copied().unwrap_or(0);
        let mut x = self.embed(tokens);
        for (l, block) in self.blocks.iter().enumerate().take(last + 1) {
            for (slot, _) in layers.iter().enumerate().filter(|&(_, &wanted)| wanted == l) {
                maps[slot] = Some(block.attention_map(x.clone()).map_err(in_layer(l))?);
            }
            x = block.forward(x).map_err(in_layer(l))?;
        }
        Ok(maps.into_iter().flatten().collect())
    }

    /// One forward pass over a prompt `tokens: [batch, N]`, N ≥ 1 → the logits of its last
    /// position `[batch, vocab]` (that row of [`Decoder::forward`], as [`Decoder::step`] gives
    /// them) and the decoding state after it, with absolute positions: what N calls of
    /// [`Decoder::step`] would leave, for the cost of one pass (docs/semantics.md §7). Windowed
    /// layers keep their last window (and sinks), full layers every key. The final norm and
    /// head run on the last position alone: the prompt's other logits (N × vocab floats, 119 MB
    /// for 604 tokens of a 49,152-word vocabulary) are never made.
    pub fn prefill(
        &self,
        tokens: Tensor<B, 2, Int>,
    ) -> Result<(Tensor<B, 2>, DecoderCache<B>), ModelError> {
        let [batch, n] = tokens.dims();
        let mut cache = self.cache(batch, CachePositions::Absolute, &tokens.device())?;
        let mut x = self.embed(tokens);
        for (l, (block, layer)) in self.blocks.iter().zip(&mut cache.layers).enumerate() {
            x = block.prefill(x, layer).map_err(in_layer(l))?;
        }
        cache.len = n;
        Ok((self.logits(x.narrow(1, n - 1, 1)).squeeze_dim(1), cache))
    }
}

#[cfg(test)]
mod tests {
    use crate::layers::AttentionKind;
    use burn::backend::NdArray;

    use super::*;

    #[test]
    fn a_clone_of_a_fresh_model_holds_its_weights() {
        let config = DecoderConfig::new(vec![AttentionKind::Full])
            .with_vocab_size(16)
            .with_d_model(8)
            .with_layers(1)
            .with_heads(2);
        let model = config.init::<NdArray>(&Default::default()).unwrap();
        let clone = model.clone();
        let weights = |m: &Decoder<NdArray>| m.embedding.weight.val().into_data();
        assert_eq!(weights(&model), weights(&clone));
    }
}
